package cuda

// Tests on a real GPU. Each skips, saying why, when Load fails (no driver,
// no device), so CI without GPUs passes them as skipped. Build with
// `go test -c ./internal/cuda/` and run the binary on the GPU machine.
// No multicast entry point is called here (DESIGN §8).

import (
	"bytes"
	_ "embed"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

//go:embed testdata/fill.ptx
var fillPTX []byte

// gpu returns the driver and device 0's primary context, or skips.
func gpu(t *testing.T) (Driver, Device, Context) {
	t.Helper()
	drv, err := Load()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	n, err := drv.DeviceCount()
	require.NoError(t, err)
	if n == 0 {
		t.Skip("no CUDA driver: it reports no devices")
	}
	dev, err := drv.DeviceGet(0)
	require.NoError(t, err)
	ctx, err := drv.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, drv.PrimaryCtxRelease(dev)) })
	return drv, dev, ctx
}

func alloc(t *testing.T, drv Driver, ctx Context, n uint64) DevicePtr {
	t.Helper()
	p, err := drv.MemAlloc(ctx, n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, drv.MemFree(ctx, p)) })
	return p
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestGPUDevices(t *testing.T) {
	drv, _, _ := gpu(t)
	v, err := drv.DriverVersion()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, v, 11000, "driver version %d", v)
	n, err := drv.DeviceCount()
	require.NoError(t, err)
	busRE := regexp.MustCompile(`^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9]$`)
	for i := 0; i < n; i++ {
		dev, err := drv.DeviceGet(i)
		require.NoError(t, err)
		name, err := drv.DeviceName(dev)
		require.NoError(t, err)
		assert.NotEmpty(t, name)
		uuid, err := drv.DeviceUUID(dev)
		require.NoError(t, err)
		assert.NotEqual(t, [16]byte{}, uuid)
		bus, err := drv.DevicePCIBusID(dev)
		require.NoError(t, err)
		assert.Regexp(t, busRE, bus)
		busNum, err := drv.DeviceAttribute(dev, AttrPCIBusID)
		require.NoError(t, err)
		assert.Contains(t, strings.ToLower(bus), ":"+hex2(busNum)+":", "PCI bus attribute agrees with the bus id string")
		mem, err := drv.DeviceTotalMem(dev)
		require.NoError(t, err)
		assert.Greater(t, mem, uint64(1<<30))
		major, err := drv.DeviceAttribute(dev, AttrComputeCapabilityMajor)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, major, 6)
		sms, err := drv.DeviceAttribute(dev, AttrMultiprocessorCount)
		require.NoError(t, err)
		assert.Greater(t, sms, 0)
		for _, a := range []DeviceAttribute{AttrVirtualMemoryManagement, AttrHandleTypePosixFDSupported,
			AttrUnifiedAddressing, AttrMulticastSupported, AttrCanUse64BitStreamMemOps, AttrCanUseStreamWaitValueNor} {
			v, err := drv.DeviceAttribute(dev, a)
			require.NoError(t, err, "attribute %d", a)
			assert.Contains(t, []int{0, 1}, v, "boolean attribute %d", a)
		}
		t.Logf("GPU%d %s %s sm_%d, %d SMs, %d MiB", i, name, bus, major, sms, mem>>20)
	}
	if n >= 2 {
		d0, _ := drv.DeviceGet(0)
		d1, _ := drv.DeviceGet(1)
		can, err := drv.DeviceCanAccessPeer(d0, d1)
		require.NoError(t, err)
		acc, err := drv.DeviceP2PAttribute(P2PAccessSupported, d0, d1)
		require.NoError(t, err)
		assert.Equal(t, can, acc == 1, "P2P access attribute agrees with cuDeviceCanAccessPeer")
	}
}

func hex2(v int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[(v>>4)&15], digits[v&15]})
}

func TestGPUMemcpyRoundTrip(t *testing.T) {
	drv, _, ctx := gpu(t)
	for _, n := range []int{1, 7, 4095, 1<<20 + 3} {
		p := alloc(t, drv, ctx, uint64(n))
		src := randomBytes(n, uint64(n))
		require.NoError(t, drv.MemcpyHtoD(ctx, p, unsafe.Pointer(&src[0]), uint64(n)))
		dst := make([]byte, n)
		require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&dst[0]), p, uint64(n)))
		assert.True(t, bytes.Equal(src, dst), "round trip of %d bytes", n)

		base, size, err := drv.MemGetAddressRange(ctx, p+DevicePtr(n/2))
		require.NoError(t, err)
		assert.Equal(t, p, base)
		assert.GreaterOrEqual(t, size, uint64(n))
	}
	free, total, err := drv.MemGetInfo(ctx)
	require.NoError(t, err)
	assert.Greater(t, total, free)
}

func TestGPUAsyncCopyAndMemset(t *testing.T) {
	drv, _, ctx := gpu(t)
	s, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s)) }()
	const n = 1 << 16
	a, b := alloc(t, drv, ctx, n), alloc(t, drv, ctx, n)
	require.NoError(t, drv.MemsetD32Async(ctx, a, 0xdeadbeef, n/4, s))
	require.NoError(t, drv.MemsetD8Async(ctx, a, 0x5a, 3, s))
	require.NoError(t, drv.MemcpyAsync(ctx, b, a, n, s))
	host, err := drv.MemAllocHost(ctx, n)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.MemFreeHost(ctx, host)) }()
	require.NoError(t, drv.MemcpyDtoHAsync(ctx, host, b, n, s))
	require.NoError(t, drv.StreamSynchronize(ctx, s))
	got := unsafe.Slice((*byte)(host), n)
	assert.Equal(t, []byte{0x5a, 0x5a, 0x5a, 0xde}, got[:4])
	assert.Equal(t, []byte{0xef, 0xbe, 0xad, 0xde}, got[n-4:])
}

func TestGPUEvents(t *testing.T) {
	drv, _, ctx := gpu(t)
	s, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s)) }()
	start, err := drv.EventCreate(ctx, true)
	require.NoError(t, err)
	end, err := drv.EventCreate(ctx, true)
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, drv.EventDestroy(ctx, start))
		assert.NoError(t, drv.EventDestroy(ctx, end))
	}()
	const n = 256 << 20
	p := alloc(t, drv, ctx, n)
	require.NoError(t, drv.EventRecord(ctx, start, s))
	for i := 0; i < 8; i++ {
		require.NoError(t, drv.MemsetD32Async(ctx, p, uint32(i), n/4, s))
	}
	require.NoError(t, drv.EventRecord(ctx, end, s))
	require.NoError(t, drv.EventSynchronize(ctx, end))
	ms, err := drv.EventElapsed(start, end)
	require.NoError(t, err)
	assert.Greater(t, ms, float32(0))
	assert.Less(t, ms, float32(10_000))
	done, err := drv.StreamQuery(ctx, s)
	require.NoError(t, err)
	assert.True(t, done)

	// A second stream ordered after the first through an event.
	s2, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s2)) }()
	require.NoError(t, drv.StreamWaitEvent(ctx, s2, end))
	require.NoError(t, drv.StreamSynchronize(ctx, s2))
}

func TestGPUStreamWriteWaitValue(t *testing.T) {
	drv, _, ctx := gpu(t)
	s, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s)) }()

	flagHost, err := drv.MemAllocHost(ctx, 64)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.MemFreeHost(ctx, flagHost)) }()
	flag := (*uint32)(flagHost)
	atomic.StoreUint32(flag, 0)
	flagDev, err := drv.MemHostGetDevicePointer(ctx, flagHost)
	require.NoError(t, err)

	word := alloc(t, drv, ctx, 4)
	require.NoError(t, drv.MemsetD32Async(ctx, word, 0, 1, s))
	require.NoError(t, drv.StreamWaitValue32(ctx, s, flagDev, 1, true))
	require.NoError(t, drv.StreamWriteValue32(ctx, s, word, 42))

	time.Sleep(50 * time.Millisecond)
	done, err := drv.StreamQuery(ctx, s)
	require.NoError(t, err)
	assert.False(t, done, "the stream must wait for the host flag")

	atomic.StoreUint32(flag, 1)
	deadline := time.Now().Add(10 * time.Second)
	for !done && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		done, err = drv.StreamQuery(ctx, s)
		require.NoError(t, err)
	}
	require.True(t, done, "stream did not pass the wait after the flag was set")
	var got uint32
	require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&got), word, 4))
	assert.Equal(t, uint32(42), got)
}

func TestGPUIpcHandle(t *testing.T) {
	drv, _, ctx := gpu(t)
	p := alloc(t, drv, ctx, 1<<20)
	h, err := drv.IpcGetMemHandle(ctx, p)
	require.NoError(t, err)
	assert.NotEqual(t, IpcMemHandle{}, h)
	h2, err := drv.IpcGetMemHandle(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, h, h2, "the handle of one allocation is stable")
}

func TestGPUVMMExportImportMap(t *testing.T) {
	drv, dev, ctx := gpu(t)
	for _, a := range []DeviceAttribute{AttrVirtualMemoryManagement, AttrHandleTypePosixFDSupported} {
		v, err := drv.DeviceAttribute(dev, a)
		require.NoError(t, err)
		if v == 0 {
			t.Skipf("device lacks attribute %d (VMM with POSIX fds)", a)
		}
	}
	prop := &AllocProp{Device: dev, HandleTypes: HandlePosixFD}
	gran, err := drv.MemGetAllocationGranularity(prop, false)
	require.NoError(t, err)
	require.NotZero(t, gran)
	size := 2 * gran

	h, err := drv.MemCreate(ctx, size, prop)
	require.NoError(t, err)
	fd, err := drv.MemExportToFD(ctx, h)
	require.NoError(t, err)
	require.GreaterOrEqual(t, fd, 0)
	h2, err := drv.MemImportFromFD(ctx, fd)
	require.NoError(t, err)
	require.NoError(t, unix.Close(fd))

	// Two views of one allocation: the original handle and the imported one.
	va1, err := drv.MemAddressReserve(ctx, size, gran)
	require.NoError(t, err)
	va2, err := drv.MemAddressReserve(ctx, size, gran)
	require.NoError(t, err)
	require.NoError(t, drv.MemMap(ctx, va1, size, h))
	require.NoError(t, drv.MemMap(ctx, va2, size, h2))
	require.NoError(t, drv.MemSetAccess(ctx, va1, size, []Device{dev}))
	require.NoError(t, drv.MemSetAccess(ctx, va2, size, []Device{dev}))

	src := randomBytes(int(size), 7)
	require.NoError(t, drv.MemcpyHtoD(ctx, va1, unsafe.Pointer(&src[0]), size))
	dst := make([]byte, size)
	require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&dst[0]), va2, size))
	assert.True(t, bytes.Equal(src, dst), "data written through one mapping reads back through the imported one")

	rh, err := drv.MemRetainAllocationHandle(ctx, va1+DevicePtr(gran))
	require.NoError(t, err)
	require.NoError(t, drv.MemRelease(ctx, rh))

	require.NoError(t, drv.MemUnmap(ctx, va2, size))
	require.NoError(t, drv.MemUnmap(ctx, va1, size))
	require.NoError(t, drv.MemAddressFree(ctx, va2, size))
	require.NoError(t, drv.MemAddressFree(ctx, va1, size))
	require.NoError(t, drv.MemRelease(ctx, h2))
	require.NoError(t, drv.MemRelease(ctx, h))
}

func TestGPUGraphCaptureReplay(t *testing.T) {
	drv, _, ctx := gpu(t)
	s, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s)) }()
	const words = 1 << 14
	a, b := alloc(t, drv, ctx, 4*words), alloc(t, drv, ctx, 4*words)

	require.NoError(t, drv.StreamBeginCapture(ctx, s, CaptureThreadLocal))
	capturing, err := drv.StreamIsCapturing(ctx, s)
	require.NoError(t, err)
	assert.True(t, capturing)
	require.NoError(t, drv.MemsetD32Async(ctx, a, 0xc0ffee11, words, s))
	require.NoError(t, drv.MemcpyAsync(ctx, b, a, 4*words, s))
	g, err := drv.StreamEndCapture(ctx, s)
	require.NoError(t, err)
	capturing, err = drv.StreamIsCapturing(ctx, s)
	require.NoError(t, err)
	assert.False(t, capturing)
	ge, err := drv.GraphInstantiate(ctx, g)
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, drv.GraphExecDestroy(ctx, ge))
		assert.NoError(t, drv.GraphDestroy(ctx, g))
	}()

	got := make([]uint32, words)
	for replay := 0; replay < 3; replay++ {
		// Capture recorded work without running it; each replay must redo it.
		require.NoError(t, drv.MemsetD32Async(ctx, b, uint32(replay), words, s))
		require.NoError(t, drv.StreamSynchronize(ctx, s))
		require.NoError(t, drv.GraphLaunch(ctx, ge, s))
		require.NoError(t, drv.StreamSynchronize(ctx, s))
		require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&got[0]), b, 4*words))
		for i, v := range got {
			if v != 0xc0ffee11 {
				t.Fatalf("replay %d: word %d = %#x, want 0xc0ffee11", replay, i, v)
			}
		}
	}
}

func TestGPULaunchKernelPTX(t *testing.T) {
	drv, _, ctx := gpu(t)
	image := append(append([]byte(nil), fillPTX...), 0) // PTX must be NUL-terminated
	m, err := drv.ModuleLoadData(ctx, image)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.ModuleUnload(ctx, m)) }()
	f, err := drv.ModuleGetFunction(ctx, m, "goccl_test_fill")
	require.NoError(t, err)
	_, err = drv.ModuleGetFunction(ctx, m, "no_such_kernel")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrorNotFound)
	assert.Contains(t, err.Error(), "no_such_kernel")

	s, err := drv.StreamCreate(ctx, true)
	require.NoError(t, err)
	defer func() { assert.NoError(t, drv.StreamDestroy(ctx, s)) }()
	const n = 1000
	out := alloc(t, drv, ctx, 8*(n+1))
	require.NoError(t, drv.MemsetD8Async(ctx, out, 0xff, 8*(n+1), s))
	const base = uint64(1) << 40
	params := NewParamBuffer(32).Ptr(out).U32(n).U64(base)
	require.NoError(t, params.Err())
	require.Equal(t, 24, params.Len(), "u64,u32,u64 packs to 24 bytes")
	cfg := LaunchConfig{Grid: Dim3{(n + 127) / 128, 1, 1}, Block: Dim3{128, 1, 1}, Stream: s}
	require.NoError(t, drv.LaunchKernel(ctx, f, cfg, params.Bytes()))
	require.NoError(t, drv.StreamSynchronize(ctx, s))
	got := make([]uint64, n+1)
	require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&got[0]), out, 8*(n+1)))
	for i := 0; i < n; i++ {
		if got[i] != base+uint64(i) {
			t.Fatalf("out[%d] = %#x, want %#x", i, got[i], base+uint64(i))
		}
	}
	assert.Equal(t, ^uint64(0), got[n], "the kernel must stop at n")

	// A programmatic launch (cuLaunchKernelEx) takes the same packed
	// parameters; after a memset, which is no kernel, it runs in order.
	require.NoError(t, drv.MemsetD8Async(ctx, out, 0xff, 8*(n+1), s))
	params = NewParamBuffer(32).Ptr(out).U32(n).U64(2 * base)
	require.NoError(t, params.Err())
	prog := cfg
	prog.Programmatic = true
	require.NoError(t, drv.LaunchKernel(ctx, f, prog, params.Bytes()))
	require.NoError(t, drv.StreamSynchronize(ctx, s))
	require.NoError(t, drv.MemcpyDtoH(ctx, unsafe.Pointer(&got[0]), out, 8*(n+1)))
	for i := 0; i < n; i++ {
		if got[i] != 2*base+uint64(i) {
			t.Fatalf("programmatic launch: out[%d] = %#x, want %#x", i, got[i], 2*base+uint64(i))
		}
	}
	assert.Equal(t, ^uint64(0), got[n], "the programmatic launch must stop at n")

	// A bad launch is an error, not a crash.
	bad := LaunchConfig{Grid: Dim3{1, 1, 1}, Block: Dim3{1 << 14, 1, 1}, Stream: s}
	err = drv.LaunchKernel(ctx, f, bad, params.Bytes())
	require.Error(t, err)
	var ce *Error
	assert.True(t, errors.As(err, &ce))
}

func TestGPUPeerAccess(t *testing.T) {
	drv, _, ctx0 := gpu(t)
	n, err := drv.DeviceCount()
	require.NoError(t, err)
	if n < 2 {
		t.Skip("needs two GPUs")
	}
	d1, err := drv.DeviceGet(1)
	require.NoError(t, err)
	ok, err := drv.DeviceCanAccessPeer(0, d1)
	require.NoError(t, err)
	if !ok {
		t.Skip("GPU0 cannot access GPU1")
	}
	ctx1, err := drv.PrimaryCtxRetain(d1)
	require.NoError(t, err)
	// Released after the allocations' cleanups (LIFO), which need the context.
	t.Cleanup(func() { assert.NoError(t, drv.PrimaryCtxRelease(d1)) })
	for _, pair := range [][2]Context{{ctx0, ctx1}, {ctx1, ctx0}} {
		err := drv.CtxEnablePeerAccess(pair[0], pair[1])
		if err != nil {
			require.ErrorIs(t, err, ErrorPeerAccessAlreadyEnabled)
		}
	}
	const size = 1 << 20
	p0 := alloc(t, drv, ctx0, size)
	p1 := alloc(t, drv, ctx1, size)
	src := randomBytes(size, 99)
	require.NoError(t, drv.MemcpyHtoD(ctx0, p0, unsafe.Pointer(&src[0]), size))
	require.NoError(t, drv.MemcpyAsync(ctx1, p1, p0, size, 0))
	require.NoError(t, drv.CtxSynchronize(ctx1))
	dst := make([]byte, size)
	require.NoError(t, drv.MemcpyDtoH(ctx1, unsafe.Pointer(&dst[0]), p1, size))
	assert.True(t, bytes.Equal(src, dst))
}

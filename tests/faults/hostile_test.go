package faults

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
)

// protocolVersion is the bootstrap's (comm/frame.go).
const protocolVersion = 2

// The bootstrap's opening message (comm/frame.go): magic u64 | version
// u32 | nranks u32 | rank u32 | pid u32 | 8 zero bytes, big endian.
func helloBytes(magic uint64, version, nranks, rank, pid uint32) []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b[0:], magic)
	binary.BigEndian.PutUint32(b[8:], version)
	binary.BigEndian.PutUint32(b[12:], nranks)
	binary.BigEndian.PutUint32(b[16:], rank)
	binary.BigEndian.PutUint32(b[20:], pid)
	return b
}

// A frame header (length u32 | kind u8 | 3 zero bytes | seq u32).
func frameHeader(length uint32, kind byte) []byte {
	b := make([]byte, 12)
	binary.BigEndian.PutUint32(b, length)
	b[4] = kind
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// dialWhenUp dials addr until rank 0 listens there.
func dialWhenUp(t *testing.T, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("rank 0 not listening at %s: %v", addr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// timeToDrop sends payload (then keeps the connection open) and returns
// how long rank 0 took to close it.
func timeToDrop(conn net.Conn, payload []byte) (time.Duration, error) {
	defer conn.Close()
	t0 := time.Now()
	if len(payload) > 0 {
		if _, err := conn.Write(payload); err != nil {
			return 0, err
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err := io.Copy(io.Discard, conn) // until rank 0 closes
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(t0), errors.New("still open after 15 s")
	}
	return time.Since(t0), nil
}

// Scenario 5: strangers on rank 0's bootstrap port while the job forms.
// Each is dropped (the hello timeout is 0.8 s; the bound below only catches
// a stranger that is never dropped, on however loaded a machine), nothing
// panics, the claimed sizes are never allocated, and the job then forms
// and computes correctly. The drop times are logged as figures.
func TestHostileBootstrapTraffic(t *testing.T) {
	const nranks, rounds = 3, 8
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	addr := id.Addr().String()
	wrongMagic := id.Magic() ^ 0x5a5a
	kinds := []struct {
		name    string
		payload func() []byte
	}{
		{"random-bytes", func() []byte { return randomBytes(4096) }},
		{"wrong-magic", func() []byte { return helloBytes(wrongMagic, protocolVersion, nranks, 1, 4242) }},
		{"truncated-hello", func() []byte { return helloBytes(id.Magic(), protocolVersion, nranks, 1, 4242)[:20] }},
		{"frame-2^32-length", func() []byte { return append(frameHeader(0xffffffff, 3), 'x') }},
		{"frame-16MiB-claim", func() []byte {
			return append(helloBytes(wrongMagic, protocolVersion, 3, 1, 1), frameHeader(16<<20, 3)...)
		}},
		{"http", func() []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }},
		{"silent", func() []byte { return nil }},
		{"reserved-bytes", func() []byte { b := helloBytes(id.Magic(), protocolVersion, nranks, 1, 4242); b[31] = 1; return b }},
	}

	type ready struct {
		c   *comm.Comm
		err error
	}
	root := make(chan ready, 1)
	go func() {
		c, err := comm.InitRank(context.Background(), id, nranks, 0, hostOpts())
		root <- ready{c, err}
	}()
	dialWhenUp(t, addr).Close()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var mu sync.Mutex
	worstDrop := map[string]time.Duration{}
	var wg sync.WaitGroup
	for i := 0; i < rounds; i++ {
		for _, k := range kinds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conn, err := net.Dial("tcp", addr)
				if !assert.NoError(t, err) {
					return
				}
				d, err := timeToDrop(conn, k.payload())
				assert.NoError(t, err, k.name)
				mu.Lock()
				worstDrop[k.name] = max(worstDrop[k.name], d)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	grew := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d hostile connections; heap allocated meanwhile: %d KiB; worst drop times: %v", rounds*len(kinds), grew>>10, worstDrop)
	assert.Less(t, grew, uint64(4<<20), "strangers' claimed sizes must not be allocated")

	// The job still forms.
	comms := make([]*comm.Comm, nranks)
	var wgj sync.WaitGroup
	errs := make([]error, nranks)
	for r := 1; r < nranks; r++ {
		wgj.Add(1)
		go func() {
			defer wgj.Done()
			comms[r], errs[r] = comm.InitRank(context.Background(), id, nranks, r, hostOpts())
		}()
	}
	wgj.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	rr := <-root
	require.NoError(t, rr.err, "rank 0")
	comms[0] = rr.c
	checkAllReduce(t, comms, 4096, 7)
	closeAll(t, comms)
}

// A hostile "rank 0": after acknowledging a rank's hello it sends a frame
// header claiming 2^32-1 bytes. The rank's init fails at once (not at its
// timeout), without allocating the claim.
func TestHostileRankZero(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				hello := make([]byte, 32)
				if _, err := io.ReadFull(c, hello); err != nil {
					return
				}
				_, _ = c.Write(frameHeader(0, 5)) // the ack
				_, _ = c.Write(frameHeader(0xffffffff, 1))
				time.Sleep(10 * time.Second)
			}()
		}
	}()
	ap, err := netipAddrPort(ln.Addr())
	require.NoError(t, err)
	id, err := comm.NewUniqueIDAt(ap)
	require.NoError(t, err)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	opts := hostOpts()
	opts.Timeout = 30 * time.Second
	t0 := time.Now()
	_, err = comm.InitRank(context.Background(), id, 2, 1, opts)
	took := time.Since(t0)
	runtime.ReadMemStats(&after)
	require.Error(t, err)
	t.Logf("rank 1's init failed after %v: %v", took, err)
	assert.Less(t, took, 5*time.Second)
	assert.Contains(t, err.Error(), "rank 0")
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4<<20))
}

func netipAddrPort(a net.Addr) (netip.AddrPort, error) {
	return netip.ParseAddrPort(a.String())
}

// Scenario 5, strangers who know the magic (it derives from the address
// alone without a job token): another user's process sends rank 0 hellos
// with the job's magic while the job forms: a second rank 1, another
// protocol version, another world size, a rank out of range. Each is
// refused and told why at once; the job forms and computes. (Needs root,
// to run a process as another user.)
func TestStrangerWithMagicCannotEndInit(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the stranger as another user")
	}
	const nranks = 3
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	type ready struct {
		c   *comm.Comm
		err error
	}
	got := make(chan ready, nranks)
	start := func(r int) {
		go func() {
			c, err := comm.InitRank(context.Background(), id, nranks, r, hostOpts())
			got <- ready{c, err}
		}()
	}
	start(0)
	start(1)
	dialWhenUp(t, id.Addr().String()).Close()
	time.Sleep(200 * time.Millisecond) // the genuine rank 1 is in
	pid := uint32(os.Getpid())
	var hellos []string
	for _, h := range [][]byte{
		helloBytes(id.Magic(), protocolVersion, nranks, 1, pid),
		helloBytes(id.Magic(), 99, nranks, 2, pid),
		helloBytes(id.Magic(), protocolVersion, 7, 2, pid),
		helloBytes(id.Magic(), protocolVersion, nranks, 9, pid),
	} {
		hellos = append(hellos, hex.EncodeToString(h))
	}
	t0 := time.Now()
	p := spawn(t, childVar+"=hello", "FAULTS_UID=65534", "FAULTS_ADDR="+id.Addr().String(), "FAULTS_HELLOS="+strings.Join(hellos, ","))
	for range hellos {
		l := p.expect(t, "REPLY", 15*time.Second)
		assert.Contains(t, l, "refused this connection: a process of uid 65534, this job runs as uid 0", l)
	}
	t.Logf("%d hellos with the job's magic refused within %v", len(hellos), time.Since(t0))
	assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
	start(2)
	comms := make([]*comm.Comm, nranks)
	for i := 0; i < nranks; i++ {
		select {
		case r := <-got:
			require.NoError(t, r.err)
			comms[r.c.Rank()] = r.c
		case <-time.After(20 * time.Second):
			t.Fatal("the job did not form")
		}
	}
	checkAllReduce(t, comms, 4096, 5)
	closeAll(t, comms)
}

// Scenario 5, fd-socket squatting: a process that derived the job token
// binds the names the ranks' fd sockets had (token and rank) before the
// job starts. The names carry rank 0's nonce now, so the job forms.
func TestFDSocketSquatter(t *testing.T) {
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	for r := 0; r < 2; r++ {
		name := fmt.Sprintf("@goccl-%s-%d", id.Token(), r)
		sq, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		require.NoError(t, err)
		defer sq.Close()
	}
	comms, errs := initRanks(context.Background(), id, 2, func(int) comm.Options { return hostOpts() })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkAllReduce(t, comms, 1024, 3)
	closeAll(t, comms)
}

// A rank given another job's magic (another token) at rank 0's address is
// refused as a stranger; it retries (the address may be a stale rank 0's)
// and its init timeout says why rather than only "not reached".
func TestWrongMagicRankHearsWhy(t *testing.T) {
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	other, err := comm.NewUniqueIDAt(id.Addr()) // same address, another magic
	require.NoError(t, err)
	opts := hostOpts()
	opts.Timeout = 2 * time.Second
	root := make(chan error, 1)
	go func() { _, err := comm.InitRank(context.Background(), id, 2, 0, opts); root <- err }()
	dialWhenUp(t, id.Addr().String()).Close()
	t0 := time.Now()
	_, err = comm.InitRank(context.Background(), other, 2, 1, opts)
	require.ErrorIs(t, err, comm.ErrTimeout)
	assert.Contains(t, err.Error(), "refused this connection: wrong magic")
	t.Logf("after %v: %v", time.Since(t0), err)
	require.ErrorIs(t, <-root, comm.ErrTimeout)
}

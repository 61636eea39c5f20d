//go:build cgo

package nvml

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildFake compiles testdata/fakenvml.c into a shared library with the
// given extra flags and returns its path.
func buildFake(t *testing.T, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found: cannot build the stand-in libnvidia-ml")
	}
	out := filepath.Join(t.TempDir(), "libfakenvml.so")
	args := append([]string{"-shared", "-fPIC", "-o", out, "testdata/fakenvml.c"}, flags...)
	b, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "gcc: %s", b)
	return out
}

func TestOpenMissingLibrary(t *testing.T) {
	lib, err := OpenPath(filepath.Join(t.TempDir(), "libnvidia-ml.so.1"))
	require.Error(t, err)
	assert.Nil(t, lib)
	assert.ErrorIs(t, err, ErrNoLibrary)
	assert.Contains(t, err.Error(), "libnvidia-ml.so.1", "the error names the file")
}

func TestOpenMissingRequiredSymbol(t *testing.T) {
	path := buildFake(t, "-DNO_COUNT")
	_, err := OpenPath(path)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoLibrary)
	assert.Contains(t, err.Error(), "nvmlDeviceGetCount_v2")
}

func TestFakeLibrary(t *testing.T) {
	lib, err := OpenPath(buildFake(t))
	require.NoError(t, err)

	_, err = lib.DeviceCount()
	assert.ErrorIs(t, err, ErrUninitialized, "calls before Init carry NVML's code")
	assert.Contains(t, err.Error(), "Uninitialized", "and nvmlErrorString's text")

	require.NoError(t, lib.Init())
	defer func() { require.NoError(t, lib.Shutdown()) }()

	n, err := lib.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 2, n)

	v, err := lib.DriverVersion()
	require.NoError(t, err)
	assert.Equal(t, "570.124.06", v)

	d0, err := lib.DeviceByIndex(0)
	require.NoError(t, err)
	d1, err := lib.DeviceByIndex(1)
	require.NoError(t, err)
	assert.NotEqual(t, d0, d1)
	_, err = lib.DeviceByIndex(2)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = lib.DeviceByIndex(-1)
	assert.ErrorIs(t, err, ErrInvalidArgument)

	byBus, err := lib.DeviceByPCIBusID("0000:2a:00.0")
	require.NoError(t, err)
	assert.Equal(t, d1, byBus)
	_, err = lib.DeviceByPCIBusID("0000:99:00.0")
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Contains(t, err.Error(), "0000:99:00.0")

	name, err := lib.Name(d0)
	require.NoError(t, err)
	assert.Equal(t, "NVIDIA H200", name)
	uuid, err := lib.UUID(d1)
	require.NoError(t, err)
	assert.Equal(t, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", uuid)

	pci, err := lib.PCIInfo(d1)
	require.NoError(t, err)
	assert.Equal(t, PCIInfo{BusID: "00000000:2A:00.0", Bus: 0x2a, DeviceID: 0x233510de, SubsystemID: 0x18bf10de}, pci)

	up, err := lib.NvLinkState(d0, 0)
	require.NoError(t, err)
	assert.True(t, up)
	up, err = lib.NvLinkState(d0, 5)
	require.NoError(t, err)
	assert.False(t, up)
	_, err = lib.NvLinkState(d0, MaxLinks)
	assert.ErrorIs(t, err, ErrInvalidArgument)

	ep, err := lib.NvLinkRemotePCIInfo(d0, 3)
	require.NoError(t, err)
	assert.Equal(t, RemoteEndpoint{BusID: "00000000:2A:00.0", DeviceID: 0x233510de, Type: RemoteGPU}, ep)
	ep, err = lib.NvLinkRemotePCIInfo(d1, 3)
	require.NoError(t, err)
	assert.Equal(t, RemoteEndpoint{BusID: "00000000:C0:00.0", DeviceID: 0x22a310de, Type: RemoteSwitch}, ep)

	for _, idx := range []P2PCapsIndex{P2PRead, P2PWrite, P2PNvLink, P2PAtomics} {
		st, err := lib.P2PStatus(d0, d1, idx)
		require.NoError(t, err)
		assert.Equal(t, P2POK, st, "index %d", idx)
	}
	st, err := lib.P2PStatus(d0, d1, 4)
	require.NoError(t, err)
	assert.Equal(t, P2PNotSupported, st)

	lvl, err := lib.TopologyCommonAncestor(d0, d1)
	require.NoError(t, err)
	assert.Equal(t, TopologySystem, lvl)
	assert.Equal(t, "SYS", lvl.Label())

	fi, err := lib.GpuFabricInfo(d0)
	require.NoError(t, err)
	assert.Equal(t, FabricCompleted, fi.State)
	assert.Equal(t, uint32(7), fi.CliqueID)
	assert.Equal(t, [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, fi.ClusterUUID)
	_, err = lib.GpuFabricInfo(d1)
	assert.ErrorIs(t, err, ErrNotSupported, "state NOT_SUPPORTED reads as ErrNotSupported")
}

func TestFakeLibraryWithoutOptionalEntryPoints(t *testing.T) {
	lib, err := OpenPath(buildFake(t, "-DMINIMAL"))
	require.NoError(t, err)
	require.NoError(t, lib.Init())
	defer func() { require.NoError(t, lib.Shutdown()) }()
	d1, err := lib.DeviceByIndex(1)
	require.NoError(t, err)

	ep, err := lib.NvLinkRemotePCIInfo(d1, 0)
	require.NoError(t, err)
	assert.Equal(t, RemoteUnknown, ep.Type, "no type query: the caller decides from the PCI class")
	assert.Equal(t, "00000000:C0:00.0", ep.BusID)

	_, err = lib.GpuFabricInfo(d1)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotSupported)
	assert.Contains(t, err.Error(), "nvmlDeviceGetGpuFabricInfo")
}

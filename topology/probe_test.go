package topology_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology"
	"github.com/goccl/goccl/topology/topotest"
)

func labels(f *topology.Facts) [][]string {
	out := make([][]string, len(f.Links))
	for i, row := range f.Links {
		for _, l := range row {
			out[i] = append(out[i], l.Label)
		}
	}
	return out
}

func TestProbeMachines(t *testing.T) {
	nv18 := [][]string{{"X", "NV18"}, {"NV18", "X"}}
	all8 := make([][]string, 8)
	for i := range all8 {
		for j := 0; j < 8; j++ {
			all8[i] = append(all8[i], map[bool]string{true: "X", false: "NV18"}[i == j])
		}
	}
	tests := []struct {
		name      string
		machine   *topotest.Machine
		labels    [][]string
		kind      topology.LinkKind // of every off-diagonal pair, "" when mixed
		bandwidth [][]float64       // GB/s per direction, nil: all zero
		paths     [][]topology.PathLevel
		p2p       [][]bool
		atomics   [][]bool
		caps      topology.Caps // of every GPU
		numa      []int
		cpuLists  []string
		switchLn  []int
		fabric    bool
		driver    string
	}{
		{
			name: "hgx-h100", machine: topotest.HGXH100(), labels: all8, kind: topology.LinkNVSwitch,
			caps:     topology.Caps{UVA: true, IPC: true, VMM: true, PosixFD: true, Fabric: true, Multicast: true},
			numa:     []int{0, 0, 0, 0, 1, 1, 1, 1},
			switchLn: []int{18, 18, 18, 18, 18, 18, 18, 18},
			fabric:   true, driver: "12.8",
		},
		{
			name: "h200x2", machine: topotest.H200x2(), labels: nv18, kind: topology.LinkNVLink,
			bandwidth: [][]float64{{0, 450}, {450, 0}},
			paths:     [][]topology.PathLevel{{"", "NODE"}, {"NODE", ""}},
			p2p:       [][]bool{{true, true}, {true, true}},
			atomics:   [][]bool{{true, true}, {true, true}},
			caps:      topology.Caps{UVA: true, IPC: true, VMM: true, PosixFD: true, Fabric: true, Multicast: true},
			numa:      []int{0, 0},
			cpuLists:  []string{"0-55,112-167", "0-55,112-167"},
			switchLn:  []int{0, 0},
			driver:    "12.8",
		},
		{
			name: "pcie4", machine: topotest.PCIe4(), kind: topology.LinkPCIe,
			labels: [][]string{
				{"X", "PXB", "SYS", "SYS"},
				{"PXB", "X", "SYS", "SYS"},
				{"SYS", "SYS", "X", "PXB"},
				{"SYS", "SYS", "PXB", "X"},
			},
			bandwidth: [][]float64{{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}},
			p2p: [][]bool{
				{true, true, false, false},
				{true, true, false, false},
				{false, false, true, true},
				{false, false, true, true},
			},
			atomics: [][]bool{
				{true, false, false, false},
				{false, true, false, false},
				{false, false, true, false},
				{false, false, false, true},
			},
			caps:     topology.Caps{UVA: true, IPC: true, VMM: true, PosixFD: true},
			numa:     []int{0, 0, 1, 1},
			cpuLists: []string{"0-55,112-167", "0-55,112-167", "56-111,168-223", "56-111,168-223"},
			switchLn: []int{0, 0, 0, 0},
			driver:   "12.4",
		},
		{
			name: "mixed", machine: topotest.Mixed(),
			labels: [][]string{
				{"X", "NV12", "NODE", "NODE"},
				{"NV12", "X", "NODE", "NODE"},
				{"NODE", "NODE", "X", "NV12"},
				{"NODE", "NODE", "NV12", "X"},
			},
			bandwidth: [][]float64{{0, 300, 0, 0}, {300, 0, 0, 0}, {0, 0, 0, 300}, {0, 0, 300, 0}},
			atomics: [][]bool{
				{true, true, false, false},
				{true, true, false, false},
				{false, false, true, true},
				{false, false, true, true},
			},
			caps:     topology.Caps{UVA: true, IPC: true, VMM: true, PosixFD: true},
			numa:     []int{0, 0, 0, 0},
			switchLn: []int{0, 0, 0, 0},
			driver:   "12.2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := topology.Probe(context.Background(), tt.machine.Source(t))
			require.NoError(t, err)
			require.Empty(t, f.NoGPUReason)
			assert.Empty(t, f.Warnings)
			assert.Equal(t, tt.driver, f.DriverVersion)
			assert.Equal(t, "570.124.06", f.NVMLDriver)
			require.Len(t, f.GPUs, len(tt.machine.GPUs))
			assert.Equal(t, tt.labels, labels(f))
			for i, row := range f.Links {
				for j, l := range row {
					switch {
					case i == j:
						assert.Equal(t, topology.LinkSelf, l.Kind)
					case tt.kind != "":
						assert.Equal(t, tt.kind, l.Kind, "GPU%d-GPU%d", i, j)
					}
					if tt.bandwidth != nil {
						assert.Equal(t, tt.bandwidth[i][j], l.BandwidthGBs, "bandwidth GPU%d-GPU%d", i, j)
					} else if i != j {
						assert.Equal(t, 450.0, l.BandwidthGBs, "18 NVLink4 links x 25 GB/s")
					}
					if tt.paths != nil {
						assert.Equal(t, tt.paths[i][j], l.Path)
					}
					if tt.p2p != nil {
						assert.Equal(t, tt.p2p[i][j], l.P2P, "P2P GPU%d-GPU%d", i, j)
					} else {
						assert.True(t, l.P2P)
					}
					if tt.atomics != nil {
						assert.Equal(t, tt.atomics[i][j], l.Atomics, "atomics GPU%d-GPU%d", i, j)
					} else {
						assert.True(t, l.Atomics)
					}
				}
			}
			for i, g := range f.GPUs {
				spec := tt.machine.GPUs[i]
				assert.Equal(t, i, g.Index)
				assert.Equal(t, spec.Name, g.Name)
				assert.Equal(t, spec.BusID, g.BusID, "bus id normalized from CUDA's upper case")
				assert.Equal(t, tt.machine.UUID(i), g.UUID)
				assert.Regexp(t, `^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, g.UUID)
				assert.Equal(t, spec.SMs, g.SMs)
				assert.Equal(t, spec.MemoryBytes, g.MemoryBytes)
				assert.Equal(t, spec.CCMajor, g.CCMajor)
				assert.Equal(t, tt.caps, g.Caps, "GPU%d caps", i)
				assert.Equal(t, tt.numa[i], g.NUMANode)
				if tt.cpuLists != nil {
					assert.Equal(t, tt.cpuLists[i], g.CPUList)
				}
				assert.Equal(t, tt.switchLn[i], g.NVSwitchLinks)
				if tt.fabric {
					require.NotNil(t, g.Fabric)
					assert.Equal(t, "completed", g.Fabric.State)
					assert.Equal(t, uint32(32766), g.Fabric.CliqueID)
				} else {
					assert.Nil(t, g.Fabric)
				}
			}
			assert.Equal(t, tt.machine.NUMA, f.NUMA)
			assert.Equal(t, topotest.XeonCPU, f.CPU)
		})
	}
}

func TestProbeNoGPU(t *testing.T) {
	f, err := topology.Probe(context.Background(), topotest.NoGPU().Source(t))
	require.NoError(t, err, "no GPU is a fact, not an error")
	assert.False(t, f.HasGPUs())
	assert.Empty(t, f.GPUs)
	assert.Empty(t, f.Links)
	assert.True(t, strings.HasPrefix(f.NoGPUReason, "no CUDA driver found"), f.NoGPUReason)
	assert.Contains(t, f.NoGPUReason, "libcuda.so.1")
	assert.Equal(t, []topology.NUMANode{{ID: 0, CPUList: "0-7"}}, f.NUMA)
	assert.Equal(t, "Intel(R) Xeon(R) Platinum 8480+", f.CPU.Brand)
}

func TestProbeZeroDevices(t *testing.T) {
	m := topotest.H200x2()
	m.GPUs = nil
	f, err := topology.Probe(context.Background(), m.Source(t))
	require.NoError(t, err)
	assert.Empty(t, f.GPUs)
	assert.Contains(t, f.NoGPUReason, "no GPU is visible")
}

func TestProbeWithoutNVML(t *testing.T) {
	m := topotest.H200x2()
	m.NoNVML = true
	f, err := topology.Probe(context.Background(), m.Source(t))
	require.NoError(t, err)
	require.Len(t, f.GPUs, 2)
	assert.Equal(t, [][]string{{"X", "?"}, {"?", "X"}}, labels(f))
	assert.Equal(t, topology.LinkUnknown, f.Links[0][1].Kind)
	assert.True(t, f.Links[0][1].P2P, "P2P comes from CUDA, NVML or not")
	require.Len(t, f.Warnings, 1)
	assert.Contains(t, f.Warnings[0], "NVML unavailable")
	assert.Empty(t, f.NVMLDriver)
}

// Without nvmlDeviceGetNvLinkRemoteDeviceType, NVSwitches are told by the
// PCI class sysfs gives for the link's far end.
func TestProbeOldNVMLFindsSwitchByPCIClass(t *testing.T) {
	m := topotest.HGXH100()
	m.OldNVML = true
	f, err := topology.Probe(context.Background(), m.Source(t))
	require.NoError(t, err)
	assert.Equal(t, topology.LinkNVSwitch, f.Links[0][7].Kind)
	assert.Equal(t, "NV18", f.Links[3][4].Label)
	assert.Equal(t, 18, f.GPUs[5].NVSwitchLinks)

	// Same for direct links: the far end is a GPU CUDA also sees.
	h := topotest.H200x2()
	h.OldNVML = true
	f, err = topology.Probe(context.Background(), h.Source(t))
	require.NoError(t, err)
	assert.Equal(t, topology.LinkNVLink, f.Links[1][0].Kind)
	assert.Equal(t, 18, f.Links[1][0].NVLinks)
}

func TestProbeMissingSysfs(t *testing.T) {
	src := topotest.H200x2().SourceAt(filepath.Join(t.TempDir(), "absent"))
	f, err := topology.Probe(context.Background(), src)
	require.NoError(t, err)
	assert.Empty(t, f.NUMA)
	assert.Equal(t, -1, f.GPUs[0].NUMANode)
	assert.Empty(t, f.GPUs[0].CPUList)
	require.Len(t, f.Warnings, 2, "one per GPU whose NUMA node is unknown")
	assert.Contains(t, f.Warnings[0], "0000:18:00.0")
}

func TestProbeCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := topology.Probe(ctx, topotest.H200x2().Source(t))
	assert.ErrorIs(t, err, context.Canceled)
}

func TestFactsEqualAndHash(t *testing.T) {
	a, err := topology.Probe(context.Background(), topotest.HGXH100().Source(t))
	require.NoError(t, err)
	b, err := topology.Probe(context.Background(), topotest.HGXH100().Source(t))
	require.NoError(t, err)
	assert.True(t, a.Equal(b), "two probes of one machine agree")
	assert.Equal(t, a.Hash(), b.Hash())
	assert.Len(t, a.Hash(), 64)

	// A rank receives the facts as JSON: they must still compare equal.
	raw, err := json.Marshal(a)
	require.NoError(t, err)
	var got topology.Facts
	require.NoError(t, json.Unmarshal(raw, &got))
	assert.True(t, a.Equal(&got))
	assert.Equal(t, a.Hash(), got.Hash())

	b.Links[2][5].P2P = false
	assert.False(t, a.Equal(b), "a pair without P2P on one rank is a different machine")
	assert.NotEqual(t, a.Hash(), b.Hash())

	c, err := topology.Probe(context.Background(), topotest.H200x2().Source(t))
	require.NoError(t, err)
	assert.False(t, a.Equal(c))
	assert.False(t, a.Equal(nil))
	assert.True(t, (*topology.Facts)(nil).Equal(nil))
}

func TestJSONFieldNames(t *testing.T) {
	f, err := topology.Probe(context.Background(), topotest.H200x2().Source(t))
	require.NoError(t, err)
	raw, err := json.Marshal(f)
	require.NoError(t, err)
	var generic map[string]any
	require.NoError(t, json.Unmarshal(raw, &generic))
	gpus := generic["gpus"].([]any)
	g0 := gpus[0].(map[string]any)
	assert.Equal(t, "0000:18:00.0", g0["bus_id"])
	assert.Equal(t, true, g0["caps"].(map[string]any)["multicast"])
	l01 := generic["links"].([]any)[0].([]any)[1].(map[string]any)
	assert.Equal(t, "NV18", l01["label"])
	assert.Equal(t, 18.0, l01["nvlinks"])
}

func TestHostCPU(t *testing.T) {
	c := topology.HostCPU()
	assert.Positive(t, c.LogicalCores)
	assert.NotNil(t, c.Features)
	// The host's own kernel view is the independent reference for cores.
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(b), "avx2") {
		assert.Contains(t, c.Features, "AVX2", "/proc/cpuinfo lists avx2")
	}
}

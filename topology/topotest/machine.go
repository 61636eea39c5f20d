package topotest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/nvml"
	"github.com/goccl/goccl/topology"
)

// GPU is one fake device.
type GPU struct {
	Name             string
	BusID            string // sysfs form, "0000:18:00.0"
	SMs              int
	MemoryBytes      uint64
	CCMajor, CCMinor int
	NUMANode         int // -1: the platform does not say
	// Driver attributes.
	UVA, VMM, PosixFD, FabricHandles, Multicast, Integrated bool
	// Fabric is what NVML's fabric query answers; nil: not supported.
	Fabric *nvml.FabricInfo
}

// Machine is a fake node. Matrices are indexed by CUDA ordinal and must be
// len(GPUs) square; the constructors below fill them.
type Machine struct {
	Name string
	GPUs []GPU
	// Direct[i][j] is the number of NVLinks between GPU i and GPU j.
	Direct [][]int
	// SwitchLinks[i] is the number of GPU i's NVLinks that end at an NVSwitch.
	SwitchLinks []int
	// Path[i][j] is NVML's common ancestor of GPU i and j.
	Path [][]nvml.TopologyLevel
	// P2P and Atomics are cuDeviceGetP2PAttribute's answers.
	P2P, Atomics [][]bool
	// NUMA is the host's nodes as sysfs lists them.
	NUMA []topology.NUMANode
	CPU  topology.CPU
	// DriverVersion is cuDriverGetVersion's value, e.g. 12080.
	DriverVersion int
	// DriverErr is what loading CUDA fails with (no GPU machine).
	DriverErr error
	// NoNVML makes loading NVML fail.
	NoNVML bool
	// OldNVML lacks nvmlDeviceGetNvLinkRemoteDeviceType: remote ends come
	// back as unknown and NVSwitches are told by their PCI class.
	OldNVML bool
}

// switchBusID is the PCI address of the NVSwitch that link k of a GPU
// reaches (four switches, as on HGX H100).
func switchBusID(k int) string { return fmt.Sprintf("0000:%02x:00.0", 0xc0+k%4) }

// Source writes the machine's sysfs under a fresh directory of t and
// returns a Source that answers as the machine.
func (m *Machine) Source(t testing.TB) topology.Source {
	t.Helper()
	root := filepath.Join(t.TempDir(), "sys")
	if err := m.WriteSysfs(root); err != nil {
		t.Fatalf("topotest: %v", err)
	}
	return m.SourceAt(root)
}

// SourceAt returns a Source reading sysfs under root (see WriteSysfs).
func (m *Machine) SourceAt(root string) topology.Source {
	src := topology.StaticSource{Sysfs: root, HostCPU: m.CPU}
	if m.DriverErr != nil {
		src.DriverErr = m.DriverErr
	} else {
		src.Driver = &Driver{M: m}
	}
	if m.NoNVML {
		src.LibErr = fmt.Errorf("%w: libnvidia-ml.so.1: cannot open shared object file", nvml.ErrNoLibrary)
	} else {
		lib := &NVML{M: m}
		_ = lib.Init() // a Source hands out NVML initialized, as the real one does
		src.Lib = lib
	}
	return src
}

// WriteSysfs writes the files topology reads: NUMA nodes and their CPU
// lists, each GPU's numa_node and local_cpulist, the NVSwitches' class.
func (m *Machine) WriteSysfs(root string) error {
	write := func(content string, rel ...string) error {
		p := filepath.Join(append([]string{root}, rel...)...)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(content+"\n"), 0o644)
	}
	for _, n := range m.NUMA {
		if err := write(n.CPUList, "devices", "system", "node", fmt.Sprintf("node%d", n.ID), "cpulist"); err != nil {
			return err
		}
	}
	// A file that looks like a node but is not one, as on real machines.
	if len(m.NUMA) > 0 {
		if err := write("0-1", "devices", "system", "node", "online"); err != nil {
			return err
		}
	}
	for _, g := range m.GPUs {
		dir := []string{"bus", "pci", "devices", g.BusID}
		if err := write(fmt.Sprint(g.NUMANode), append(dir, "numa_node")...); err != nil {
			return err
		}
		if err := write("0x030200", append(dir, "class")...); err != nil {
			return err
		}
		if cpus := m.nodeCPUs(g.NUMANode); cpus != "" {
			if err := write(cpus, append(dir, "local_cpulist")...); err != nil {
				return err
			}
		}
	}
	for k := 0; k < 4; k++ {
		if err := write("0x068000", "bus", "pci", "devices", switchBusID(k), "class"); err != nil {
			return err
		}
	}
	return nil
}

func (m *Machine) nodeCPUs(node int) string {
	for _, n := range m.NUMA {
		if n.ID == node {
			return n.CPUList
		}
	}
	return ""
}

// gpuByBus finds a GPU by bus id in any of the forms CUDA, NVML or sysfs use.
func (m *Machine) gpuByBus(bus string) (int, bool) {
	want := topology.NormalizeBusID(bus)
	for i, g := range m.GPUs {
		if topology.NormalizeBusID(g.BusID) == want {
			return i, true
		}
	}
	return 0, false
}

// uuid is a deterministic device UUID for GPU i.
func (m *Machine) uuid(i int) [16]byte {
	var u [16]byte
	copy(u[:], fmt.Sprintf("%-12.12s%04d", strings.ToLower(strings.ReplaceAll(m.Name, " ", "")), i))
	return u
}

// UUID is the string topology reports for GPU i.
func (m *Machine) UUID(i int) string {
	u := m.uuid(i)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// square returns an n×n matrix with v off the diagonal and diag on it.
func square[T any](n int, v, diag T) [][]T {
	out := make([][]T, n)
	for i := range out {
		out[i] = make([]T, n)
		for j := range out[i] {
			if i == j {
				out[i][j] = diag
			} else {
				out[i][j] = v
			}
		}
	}
	return out
}

var _ cuda.Driver = (*Driver)(nil)

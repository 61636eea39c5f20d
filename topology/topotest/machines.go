package topotest

import (
	"fmt"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/nvml"
	"github.com/goccl/goccl/topology"
)

const gib = 1 << 30

// XeonCPU is the host CPU every fake machine reports.
var XeonCPU = topology.CPU{
	Vendor:        "GenuineIntel",
	Brand:         "Intel(R) Xeon(R) Platinum 8480+",
	Family:        6,
	Model:         143,
	Features:      []string{"SSE4.2", "AVX", "AVX2", "FMA3", "F16C", "AVX512F", "AVX512BW", "AVX512VL", "AVX512_BF16", "AVX512_FP16", "AMX_BF16"},
	PhysicalCores: 112,
	LogicalCores:  224,
}

var twoNodes = []topology.NUMANode{{ID: 0, CPUList: "0-55,112-167"}, {ID: 1, CPUList: "56-111,168-223"}}

// pathByNode gives NODE within a NUMA node and SYS across, with same
// overriding pairs that share a PCIe switch tree.
func pathByNode(gpus []GPU, same nvml.TopologyLevel) [][]nvml.TopologyLevel {
	p := square(len(gpus), nvml.TopologySystem, nvml.TopologyInternal)
	for i := range gpus {
		for j := range gpus {
			if i != j && gpus[i].NUMANode == gpus[j].NUMANode {
				p[i][j] = same
			}
		}
	}
	return p
}

func hopper(name, bus string, node int, mem uint64) GPU {
	return GPU{
		Name: name, BusID: bus, SMs: 132, MemoryBytes: mem, CCMajor: 9, CCMinor: 0, NUMANode: node,
		UVA: true, VMM: true, PosixFD: true, FabricHandles: true, Multicast: true,
	}
}

// HGXH100 is an 8-GPU HGX H100 board: every GPU has 18 NVLinks to the
// NVSwitches (NV18 between every pair), four GPUs per NUMA node, fabric
// manager running.
func HGXH100() *Machine {
	buses := []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
		"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}
	m := &Machine{Name: "HGX H100", NUMA: twoNodes, CPU: XeonCPU, DriverVersion: 12080}
	for i, b := range buses {
		g := hopper("NVIDIA H100 80GB HBM3", b, i/4, 80*gib)
		g.Fabric = &nvml.FabricInfo{ClusterUUID: [16]byte{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, CliqueID: 32766, State: nvml.FabricCompleted}
		m.GPUs = append(m.GPUs, g)
	}
	n := len(m.GPUs)
	m.Direct = square(n, 0, 0)
	m.SwitchLinks = []int{18, 18, 18, 18, 18, 18, 18, 18}
	m.Path = pathByNode(m.GPUs, nvml.TopologyNode)
	m.P2P = square(n, true, false)
	m.Atomics = square(n, true, false)
	return m
}

// H200x2 is our GPU machine: two H200 joined by 18 direct NVLinks, on one
// NUMA node, with multicast, VMM, POSIX fd and fabric handles supported.
func H200x2() *Machine {
	m := &Machine{Name: "2x H200", NUMA: twoNodes, CPU: XeonCPU, DriverVersion: 12080}
	m.GPUs = []GPU{
		hopper("NVIDIA H200", "0000:18:00.0", 0, 141*gib),
		hopper("NVIDIA H200", "0000:2a:00.0", 0, 141*gib),
	}
	m.Direct = [][]int{{0, 18}, {18, 0}}
	m.SwitchLinks = []int{0, 0}
	m.Path = pathByNode(m.GPUs, nvml.TopologyNode)
	m.P2P = square(2, true, false)
	m.Atomics = square(2, true, false)
	return m
}

func ada(bus string, node int) GPU {
	return GPU{
		Name: "NVIDIA L40S", BusID: bus, SMs: 142, MemoryBytes: 45 * gib, CCMajor: 8, CCMinor: 9, NUMANode: node,
		UVA: true, VMM: true, PosixFD: true,
	}
}

// PCIe4 is four PCIe GPUs without NVLink, two per NUMA node: pairs on one
// node share a PCIe switch tree (PXB) and have P2P; pairs across nodes
// (SYS) have none. No native atomics over PCIe.
func PCIe4() *Machine {
	m := &Machine{Name: "4x L40S PCIe", NUMA: twoNodes, CPU: XeonCPU, DriverVersion: 12040}
	m.GPUs = []GPU{ada("0000:17:00.0", 0), ada("0000:31:00.0", 0), ada("0000:b1:00.0", 1), ada("0000:ca:00.0", 1)}
	n := len(m.GPUs)
	m.Direct = square(n, 0, 0)
	m.SwitchLinks = make([]int, n)
	m.Path = pathByNode(m.GPUs, nvml.TopologyMultiple)
	m.P2P = square(n, false, false)
	for i := range m.GPUs {
		for j := range m.GPUs {
			m.P2P[i][j] = i != j && m.GPUs[i].NUMANode == m.GPUs[j].NUMANode
		}
	}
	m.Atomics = square(n, false, false)
	return m
}

func ampere(bus string) GPU {
	return GPU{
		Name: "NVIDIA A100-PCIE-40GB", BusID: bus, SMs: 108, MemoryBytes: 40 * gib, CCMajor: 8, CCMinor: 0, NUMANode: 0,
		UVA: true, VMM: true, PosixFD: true,
	}
}

// Mixed is a box of four A100 PCIe cards on one NUMA node where NVLink
// bridges join GPU0-GPU1 and GPU2-GPU3 (12 links each); the other pairs
// talk over PCIe through the host bridges (NODE), with P2P but without
// native atomics.
func Mixed() *Machine {
	m := &Machine{Name: "mixed A100", NUMA: []topology.NUMANode{{ID: 0, CPUList: "0-63"}}, CPU: XeonCPU, DriverVersion: 12020}
	m.GPUs = []GPU{ampere("0000:01:00.0"), ampere("0000:21:00.0"), ampere("0000:41:00.0"), ampere("0000:61:00.0")}
	n := len(m.GPUs)
	m.Direct = [][]int{{0, 12, 0, 0}, {12, 0, 0, 0}, {0, 0, 0, 12}, {0, 0, 12, 0}}
	m.SwitchLinks = make([]int, n)
	m.Path = square(n, nvml.TopologyNode, nvml.TopologyInternal)
	m.P2P = square(n, true, false)
	m.Atomics = square(n, false, false)
	for i := range m.GPUs {
		for j := range m.GPUs {
			m.Atomics[i][j] = m.Direct[i][j] > 0
		}
	}
	return m
}

// NoGPU is a machine without a CUDA driver (CI).
func NoGPU() *Machine {
	return &Machine{
		Name:      "no GPU",
		NUMA:      []topology.NUMANode{{ID: 0, CPUList: "0-7"}},
		CPU:       XeonCPU,
		DriverErr: fmt.Errorf("%w: libcuda.so.1: cannot open shared object file: No such file or directory", cuda.ErrNoDriver),
		NoNVML:    true,
	}
}

// All returns a fresh copy of every machine, by name.
func All() map[string]*Machine {
	return map[string]*Machine{
		"hgx-h100": HGXH100(),
		"h200x2":   H200x2(),
		"pcie4":    PCIe4(),
		"mixed":    Mixed(),
		"nogpu":    NoGPU(),
	}
}

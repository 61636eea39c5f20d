package topology

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Facts is everything goccl decides from. It is plain data: it serializes
// to JSON, and ranks compare theirs (Equal, Hash) before choosing anything,
// so it holds nothing specific to the process that probed it.
type Facts struct {
	// DriverVersion is the CUDA driver API version, e.g. "12.8"; NVMLDriver
	// the kernel driver's, e.g. "570.124.06" (empty without NVML).
	DriverVersion string `json:"driver_version,omitempty"`
	NVMLDriver    string `json:"nvml_driver,omitempty"`
	// NoGPUReason says why GPUs is empty (no driver, no device).
	NoGPUReason string `json:"no_gpu_reason,omitempty"`
	GPUs        []GPU  `json:"gpus"`
	// Links[i][j] describes the path from GPUs[i] to GPUs[j]; Links[i][i]
	// is LinkSelf.
	Links [][]Link   `json:"links"`
	CPU   CPU        `json:"cpu"`
	NUMA  []NUMANode `json:"numa"`
	// Warnings are facts that could not be learned (NVML missing, a sysfs
	// file unreadable); the probe carries on without them.
	Warnings []string `json:"warnings,omitempty"`
}

// GPU is one CUDA device as the driver enumerates it.
type GPU struct {
	Index       int    `json:"index"` // CUDA ordinal
	Name        string `json:"name"`
	UUID        string `json:"uuid"`   // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
	BusID       string `json:"bus_id"` // normalized: "0000:18:00.0"
	SMs         int    `json:"sms"`
	MemoryBytes uint64 `json:"memory_bytes"`
	CCMajor     int    `json:"cc_major"`
	CCMinor     int    `json:"cc_minor"`
	// NUMANode is -1 where the platform does not say.
	NUMANode int    `json:"numa_node"`
	CPUList  string `json:"cpu_list,omitempty"` // CPUs close to the GPU, "0-47,96-143"
	Caps     Caps   `json:"caps"`
	// NVSwitchLinks counts active NVLinks that end at an NVSwitch.
	NVSwitchLinks int `json:"nvswitch_links"`
	// Fabric is set where the driver reports NVLink fabric membership.
	Fabric *Fabric `json:"fabric,omitempty"`
}

// ComputeCapability is "9.0" style.
func (g GPU) ComputeCapability() string { return fmt.Sprintf("%d.%d", g.CCMajor, g.CCMinor) }

// Caps are the driver's capability flags for one GPU. Multicast is the
// attribute only: nothing here calls cuMulticast* (DESIGN §8).
type Caps struct {
	UVA       bool `json:"uva"`
	IPC       bool `json:"ipc"`
	VMM       bool `json:"vmm"`
	PosixFD   bool `json:"posix_fd"`
	Fabric    bool `json:"fabric"`
	Multicast bool `json:"multicast"`
}

// Fabric is the GPU's NVLink fabric membership (nvmlGpuFabricInfo_t).
type Fabric struct {
	ClusterUUID string `json:"cluster_uuid"`
	CliqueID    uint32 `json:"clique_id"`
	State       string `json:"state"`
}

// LinkKind is how two GPUs reach each other.
type LinkKind string

const (
	LinkSelf     LinkKind = "self"     // the GPU itself
	LinkNVLink   LinkKind = "nvlink"   // direct NVLinks between the two
	LinkNVSwitch LinkKind = "nvswitch" // both GPUs' NVLinks end at NVSwitches
	LinkPCIe     LinkKind = "pcie"     // no NVLink path: PCIe (or the CPU interconnect)
	LinkUnknown  LinkKind = "unknown"  // no NVML to tell
)

// PathLevel is nvidia-smi topo -m's PCIe path class.
type PathLevel string

const (
	PathPIX  PathLevel = "PIX"  // at most one PCIe switch
	PathPXB  PathLevel = "PXB"  // several PCIe switches, no host bridge
	PathPHB  PathLevel = "PHB"  // through a PCIe host bridge
	PathNODE PathLevel = "NODE" // host bridges within one NUMA node
	PathSYS  PathLevel = "SYS"  // across NUMA nodes (SMP interconnect)
)

// Link is the path from one GPU to another.
type Link struct {
	Kind LinkKind `json:"kind"`
	// NVLinks is the number of NVLinks joining the pair (for NVSwitch, the
	// fewer of the two GPUs' switch links, as nvidia-smi shows it).
	NVLinks int `json:"nvlinks,omitempty"`
	// BandwidthGBs is the nominal bandwidth per direction: links × per-link
	// rate of the NVLink generation; 0 for PCIe (not estimated).
	BandwidthGBs float64 `json:"bandwidth_gbs,omitempty"`
	// Path is the PCIe path level; set for every pair NVML describes, also
	// those that have NVLink.
	Path PathLevel `json:"path,omitempty"`
	// P2P and Atomics are cuDeviceGetP2PAttribute's access and native
	// atomics from this GPU to the other.
	P2P     bool `json:"p2p"`
	Atomics bool `json:"atomics"`
	// Label is nvidia-smi's: X, NV18, PIX, PXB, PHB, NODE, SYS.
	Label string `json:"label"`
}

// NUMANode is one node of the host and its CPUs.
type NUMANode struct {
	ID      int    `json:"id"`
	CPUList string `json:"cpu_list"`
}

// CPU describes the host processor.
type CPU struct {
	Vendor        string   `json:"vendor"`
	Brand         string   `json:"brand"`
	Family        int      `json:"family"`
	Model         int      `json:"model"`
	Features      []string `json:"features"` // the ones goccl cares about, e.g. AVX2, AVX512F
	PhysicalCores int      `json:"physical_cores"`
	LogicalCores  int      `json:"logical_cores"`
}

// HasGPUs reports whether any GPU was found.
func (f *Facts) HasGPUs() bool { return f != nil && len(f.GPUs) > 0 }

// Link returns the link from GPU a to GPU b; ok is false for indices out
// of range.
func (f *Facts) Link(a, b int) (Link, bool) {
	if a < 0 || b < 0 || a >= len(f.Links) || b >= len(f.Links[a]) {
		return Link{}, false
	}
	return f.Links[a][b], true
}

// canonical is the encoding Equal and Hash compare: JSON of the struct
// (field order fixed by the type), so facts received from a peer compare
// equal to the sender's whatever nil-versus-empty slices they went through.
func (f *Facts) canonical() []byte {
	// Cannot fail: strings, ints, bools and finite floats only.
	b, _ := json.Marshal(f)
	return b
}

// Equal reports whether two probes saw the same machine.
func (f *Facts) Equal(o *Facts) bool {
	if f == nil || o == nil {
		return f == o
	}
	return bytes.Equal(f.canonical(), o.canonical())
}

// Hash is a stable digest of the facts (hex SHA-256 of the canonical
// encoding), cheap to exchange and compare across ranks.
func (f *Facts) Hash() string {
	sum := sha256.Sum256(f.canonical())
	return hex.EncodeToString(sum[:])
}

package nvml

import "fmt"

// MaxLinks is NVML_NVLINK_MAX_LINKS: link indices run 0..MaxLinks-1
// (18 on Hopper and Blackwell).
const MaxLinks = 18

// Device is an nvmlDevice_t: an opaque handle owned by the library, carried
// as an integer so that no Go pointer crosses cgo.
type Device uintptr

// PCIInfo is the part of nvmlPciInfo_t goccl uses.
type PCIInfo struct {
	BusID       string // "00000000:18:00.0" as NVML writes it
	Domain      uint32
	Bus         uint32
	Device      uint32
	DeviceID    uint32 // combined 16-bit device id and 16-bit vendor id
	SubsystemID uint32
}

// RemoteType is nvmlIntNvLinkDeviceType_t: what sits at the far end of a link.
type RemoteType uint32

const (
	RemoteGPU     RemoteType = 0x00 // NVML_NVLINK_DEVICE_TYPE_GPU
	RemoteIBMNPU  RemoteType = 0x01 // NVML_NVLINK_DEVICE_TYPE_IBMNPU
	RemoteSwitch  RemoteType = 0x02 // NVML_NVLINK_DEVICE_TYPE_SWITCH
	RemoteUnknown RemoteType = 0xFF // NVML_NVLINK_DEVICE_TYPE_UNKNOWN
)

// String gives a short name ("GPU", "NVSwitch", ...).
func (t RemoteType) String() string {
	switch t {
	case RemoteGPU:
		return "GPU"
	case RemoteIBMNPU:
		return "IBM NPU"
	case RemoteSwitch:
		return "NVSwitch"
	case RemoteUnknown:
		return "unknown"
	}
	return fmt.Sprintf("RemoteType(%d)", uint32(t))
}

// RemoteEndpoint is the far end of one NVLink. Type is RemoteUnknown when
// the driver lacks nvmlDeviceGetNvLinkRemoteDeviceType; callers then tell
// an NVSwitch by its PCI class (0x068000, see NVSwitchPCIClass).
type RemoteEndpoint struct {
	BusID    string
	DeviceID uint32
	Type     RemoteType
}

// NVSwitchPCIClass is the PCI class code (bridge, "other") NVSwitches report
// in sysfs, used where the driver cannot name the remote device type.
const NVSwitchPCIClass = 0x068000

// P2PCapsIndex is nvmlGpuP2PCapsIndex_t.
type P2PCapsIndex uint32

const (
	P2PRead    P2PCapsIndex = 0 // NVML_P2P_CAPS_INDEX_READ
	P2PWrite   P2PCapsIndex = 1 // NVML_P2P_CAPS_INDEX_WRITE
	P2PNvLink  P2PCapsIndex = 2 // NVML_P2P_CAPS_INDEX_NVLINK
	P2PAtomics P2PCapsIndex = 3 // NVML_P2P_CAPS_INDEX_ATOMICS
)

// P2PStatus is nvmlGpuP2PStatus_t; P2POK means the capability is there.
type P2PStatus uint32

const (
	P2POK                      P2PStatus = 0 // the capability is there
	P2PChipsetNotSupported     P2PStatus = 1 // the chipset does not support it
	P2PGPUNotSupported         P2PStatus = 2 // the GPU does not support it
	P2PIOHTopologyNotSupported P2PStatus = 3 // the I/O hub topology does not allow it
	P2PDisabledByRegkey        P2PStatus = 4 // disabled by a driver registry key
	P2PNotSupported            P2PStatus = 5 // not supported
	P2PUnknown                 P2PStatus = 6 // unknown
)

// String gives the status in words ("OK", "chipset not supported", ...).
func (s P2PStatus) String() string {
	switch s {
	case P2POK:
		return "OK"
	case P2PChipsetNotSupported:
		return "chipset not supported"
	case P2PGPUNotSupported:
		return "GPU not supported"
	case P2PIOHTopologyNotSupported:
		return "IOH topology not supported"
	case P2PDisabledByRegkey:
		return "disabled by regkey"
	case P2PNotSupported:
		return "not supported"
	}
	return "unknown"
}

// TopologyLevel is nvmlGpuTopologyLevel_t: the closest common ancestor of
// two GPUs on the PCIe tree, the source of nvidia-smi's PIX/PXB/PHB/NODE/SYS.
type TopologyLevel uint32

const (
	TopologyInternal   TopologyLevel = 0  // same board
	TopologySingle     TopologyLevel = 10 // one PCIe switch: PIX
	TopologyMultiple   TopologyLevel = 20 // several PCIe switches: PXB
	TopologyHostBridge TopologyLevel = 30 // one host bridge: PHB
	TopologyNode       TopologyLevel = 40 // one NUMA node: NODE
	TopologySystem     TopologyLevel = 50 // across NUMA nodes: SYS
)

// Label is nvidia-smi topo -m's name for the level.
func (l TopologyLevel) Label() string {
	switch l {
	case TopologyInternal, TopologySingle:
		return "PIX"
	case TopologyMultiple:
		return "PXB"
	case TopologyHostBridge:
		return "PHB"
	case TopologyNode:
		return "NODE"
	case TopologySystem:
		return "SYS"
	}
	return fmt.Sprintf("TopologyLevel(%d)", uint32(l))
}

// FabricState is nvmlGpuFabricState_t.
type FabricState uint8

const (
	FabricNotSupported FabricState = 0 // NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
	FabricNotStarted   FabricState = 1 // NVML_GPU_FABRIC_STATE_NOT_STARTED
	FabricInProgress   FabricState = 2 // NVML_GPU_FABRIC_STATE_IN_PROGRESS
	FabricCompleted    FabricState = 3 // NVML_GPU_FABRIC_STATE_COMPLETED
)

// String gives the state in words ("completed", ...).
func (s FabricState) String() string {
	switch s {
	case FabricNotSupported:
		return "not supported"
	case FabricNotStarted:
		return "not started"
	case FabricInProgress:
		return "in progress"
	case FabricCompleted:
		return "completed"
	}
	return fmt.Sprintf("FabricState(%d)", uint8(s))
}

// FabricInfo is nvmlGpuFabricInfo_t: the GPU's place in an NVLink fabric
// managed by the fabric manager (NVSwitch systems).
type FabricInfo struct {
	ClusterUUID [16]byte
	Status      Return // the fabric manager's result for this GPU
	CliqueID    uint32
	State       FabricState
}

// Lib is the part of NVML goccl uses. Open returns the real library;
// topology tests implement it with fakes.
type Lib interface {
	Init() error
	Shutdown() error
	DriverVersion() (string, error)
	DeviceCount() (int, error)
	DeviceByIndex(i int) (Device, error)
	// DeviceByPCIBusID accepts "0000:18:00.0" or "00000000:18:00.0".
	DeviceByPCIBusID(busID string) (Device, error)
	Name(d Device) (string, error)
	UUID(d Device) (string, error)
	PCIInfo(d Device) (PCIInfo, error)
	// NvLinkState reports whether link (0..MaxLinks-1) is active; links the
	// device does not have answer ErrInvalidArgument or ErrNotSupported.
	NvLinkState(d Device, link int) (bool, error)
	NvLinkRemotePCIInfo(d Device, link int) (RemoteEndpoint, error)
	P2PStatus(a, b Device, index P2PCapsIndex) (P2PStatus, error)
	TopologyCommonAncestor(a, b Device) (TopologyLevel, error)
	// GpuFabricInfo answers ErrNotSupported where the driver has no fabric
	// information for the GPU.
	GpuFabricInfo(d Device) (FabricInfo, error)
}

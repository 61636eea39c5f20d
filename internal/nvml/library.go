package nvml

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Buffer sizes NVML documents as always large enough.
const (
	nameBufSize    = 96 // NVML_DEVICE_NAME_V2_BUFFER_SIZE
	uuidBufSize    = 96 // NVML_DEVICE_UUID_V2_BUFFER_SIZE
	versionBufSize = 80 // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
)

// library is the real Lib: a dlopen handle and its symbol table.
type library struct {
	l *C.gn_lib
}

// OpenPath is Open for a given file name or path (tests load stand-ins).
func OpenPath(path string) (Lib, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	l := C.gn_load(cpath, &msg[0], C.size_t(len(msg)))
	if l == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoLibrary, C.GoString(&msg[0]))
	}
	return &library{l: l}, nil
}

// check turns a result code into nil or an *Error with NVML's text.
func (b *library) check(fn string, r C.int) error {
	if r == 0 {
		return nil
	}
	code := Return(r)
	text := "Function Not Found"
	if code != ReturnFuncNotFound {
		text = C.GoString(C.gn_error_string(b.l, r))
	}
	return &Error{Func: fn, Code: code, Text: text}
}

func (b *library) Init() error { return b.check("nvmlInit_v2", C.gn_init(b.l)) }

func (b *library) Shutdown() error { return b.check("nvmlShutdown", C.gn_shutdown(b.l)) }

func (b *library) DriverVersion() (string, error) {
	var buf [versionBufSize]C.char
	if err := b.check("nvmlSystemGetDriverVersion", C.gn_driver_version(b.l, &buf[0], C.uint(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (b *library) DeviceCount() (int, error) {
	var n C.uint
	if err := b.check("nvmlDeviceGetCount_v2", C.gn_device_count(b.l, &n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (b *library) DeviceByIndex(i int) (Device, error) {
	if i < 0 {
		return 0, &Error{Func: "nvmlDeviceGetHandleByIndex_v2", Code: ReturnInvalidArg, Text: fmt.Sprintf("negative index %d", i)}
	}
	var d C.uintptr_t
	if err := b.check("nvmlDeviceGetHandleByIndex_v2", C.gn_device_by_index(b.l, C.uint(i), &d)); err != nil {
		return 0, err
	}
	return Device(d), nil
}

func (b *library) DeviceByPCIBusID(busID string) (Device, error) {
	cbus := C.CString(busID)
	defer C.free(unsafe.Pointer(cbus))
	var d C.uintptr_t
	if err := b.check("nvmlDeviceGetHandleByPciBusId_v2", C.gn_device_by_bus_id(b.l, cbus, &d)); err != nil {
		return 0, fmt.Errorf("PCI bus id %q: %w", busID, err)
	}
	return Device(d), nil
}

func (b *library) Name(d Device) (string, error) {
	var buf [nameBufSize]C.char
	if err := b.check("nvmlDeviceGetName", C.gn_name(b.l, C.uintptr_t(d), &buf[0], C.uint(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (b *library) UUID(d Device) (string, error) {
	var buf [uuidBufSize]C.char
	if err := b.check("nvmlDeviceGetUUID", C.gn_uuid(b.l, C.uintptr_t(d), &buf[0], C.uint(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func pciFromC(p *C.gn_pci_info) PCIInfo {
	bus := C.GoString(&p.busId[0])
	if bus == "" { // drivers that only fill the legacy field
		bus = C.GoString(&p.busIdLegacy[0])
	}
	return PCIInfo{
		BusID:       strings.TrimSpace(bus),
		Domain:      uint32(p.domain),
		Bus:         uint32(p.bus),
		Device:      uint32(p.device),
		DeviceID:    uint32(p.pciDeviceId),
		SubsystemID: uint32(p.pciSubSystemId),
	}
}

func (b *library) PCIInfo(d Device) (PCIInfo, error) {
	var p C.gn_pci_info
	if err := b.check("nvmlDeviceGetPciInfo_v3", C.gn_pci(b.l, C.uintptr_t(d), &p)); err != nil {
		return PCIInfo{}, err
	}
	return pciFromC(&p), nil
}

func checkLink(fn string, link int) error {
	if link < 0 || link >= MaxLinks {
		return &Error{Func: fn, Code: ReturnInvalidArg, Text: fmt.Sprintf("link %d out of range 0..%d", link, MaxLinks-1)}
	}
	return nil
}

func (b *library) NvLinkState(d Device, link int) (bool, error) {
	const fn = "nvmlDeviceGetNvLinkState"
	if err := checkLink(fn, link); err != nil {
		return false, err
	}
	var active C.uint
	if err := b.check(fn, C.gn_nvlink_state(b.l, C.uintptr_t(d), C.uint(link), &active)); err != nil {
		return false, fmt.Errorf("link %d: %w", link, err)
	}
	return active != 0, nil
}

func (b *library) NvLinkRemotePCIInfo(d Device, link int) (RemoteEndpoint, error) {
	const fn = "nvmlDeviceGetNvLinkRemotePciInfo_v2"
	if err := checkLink(fn, link); err != nil {
		return RemoteEndpoint{}, err
	}
	var p C.gn_pci_info
	if err := b.check(fn, C.gn_nvlink_remote_pci(b.l, C.uintptr_t(d), C.uint(link), &p)); err != nil {
		return RemoteEndpoint{}, fmt.Errorf("link %d: %w", link, err)
	}
	pci := pciFromC(&p)
	ep := RemoteEndpoint{BusID: pci.BusID, DeviceID: pci.DeviceID, Type: RemoteUnknown}
	// Older drivers lack the type query: leave RemoteUnknown and let the
	// caller look at the PCI class.
	if C.gn_has(b.l, C.GN_NVLINK_REMOTE_TYPE) != 0 {
		var t C.uint
		if err := b.check("nvmlDeviceGetNvLinkRemoteDeviceType", C.gn_nvlink_remote_type(b.l, C.uintptr_t(d), C.uint(link), &t)); err == nil {
			ep.Type = RemoteType(t)
		}
	}
	return ep, nil
}

func (b *library) P2PStatus(a, c Device, index P2PCapsIndex) (P2PStatus, error) {
	var s C.uint
	if err := b.check("nvmlDeviceGetP2PStatus", C.gn_p2p_status(b.l, C.uintptr_t(a), C.uintptr_t(c), C.uint(index), &s)); err != nil {
		return P2PUnknown, err
	}
	return P2PStatus(s), nil
}

func (b *library) TopologyCommonAncestor(a, c Device) (TopologyLevel, error) {
	var lvl C.uint
	if err := b.check("nvmlDeviceGetTopologyCommonAncestor", C.gn_common_ancestor(b.l, C.uintptr_t(a), C.uintptr_t(c), &lvl)); err != nil {
		return 0, err
	}
	return TopologyLevel(lvl), nil
}

func (b *library) GpuFabricInfo(d Device) (FabricInfo, error) {
	const fn = "nvmlDeviceGetGpuFabricInfo"
	var f C.gn_fabric_info
	if err := b.check(fn, C.gn_fabric(b.l, C.uintptr_t(d), &f)); err != nil {
		return FabricInfo{}, err
	}
	if FabricState(f.state) == FabricNotSupported {
		return FabricInfo{}, &Error{Func: fn, Code: ReturnNotSupported, Text: "fabric state: not supported"}
	}
	info := FabricInfo{Status: Return(f.status), CliqueID: uint32(f.cliqueId), State: FabricState(f.state)}
	for i := range info.ClusterUUID {
		info.ClusterUUID[i] = byte(f.clusterUuid[i])
	}
	return info, nil
}

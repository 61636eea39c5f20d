package topotest

import (
	"fmt"
	"strings"

	"github.com/goccl/goccl/internal/nvml"
)

// NVML answers nvml.Lib as the machine's libnvidia-ml would. Handles are
// ordinal+1 so that a zero handle is never valid. GPU i's NVLinks are
// numbered switch links first, then direct links peer by peer.
type NVML struct {
	M     *Machine
	inits int
}

func nvmlErr(fn string, code nvml.Return, text string) error {
	return &nvml.Error{Func: fn, Code: code, Text: text}
}

func (l *NVML) dev(fn string, d nvml.Device) (int, error) {
	i := int(d) - 1
	if i < 0 || i >= len(l.M.GPUs) {
		return 0, nvmlErr(fn, nvml.ReturnInvalidArg, "Invalid Argument")
	}
	if l.inits == 0 {
		return 0, nvmlErr(fn, nvml.ReturnUninitialized, "Uninitialized")
	}
	return i, nil
}

// Init counts one more initialisation, as nvmlInit does.
func (l *NVML) Init() error { l.inits++; return nil }

// Shutdown undoes one Init; with none left it fails as NVML does.
func (l *NVML) Shutdown() error {
	if l.inits == 0 {
		return nvmlErr("nvmlShutdown", nvml.ReturnUninitialized, "Uninitialized")
	}
	l.inits--
	return nil
}

// DriverVersion gives a fixed driver version.
func (l *NVML) DriverVersion() (string, error) { return "570.124.06", nil }

// DeviceCount answers nvml.Lib's query from the Machine.
func (l *NVML) DeviceCount() (int, error) { return len(l.M.GPUs), nil }

// DeviceByIndex answers nvml.Lib's query from the Machine.
func (l *NVML) DeviceByIndex(i int) (nvml.Device, error) {
	if i < 0 || i >= len(l.M.GPUs) {
		return 0, nvmlErr("nvmlDeviceGetHandleByIndex_v2", nvml.ReturnInvalidArg, "Invalid Argument")
	}
	return nvml.Device(i + 1), nil
}

// DeviceByPCIBusID answers nvml.Lib's query from the Machine.
func (l *NVML) DeviceByPCIBusID(bus string) (nvml.Device, error) {
	if i, ok := l.M.gpuByBus(bus); ok {
		return nvml.Device(i + 1), nil
	}
	return 0, nvmlErr("nvmlDeviceGetHandleByPciBusId_v2", nvml.ReturnNotFound, "Not Found")
}

// Name answers nvml.Lib's query from the Machine.
func (l *NVML) Name(d nvml.Device) (string, error) {
	i, err := l.dev("nvmlDeviceGetName", d)
	if err != nil {
		return "", err
	}
	return l.M.GPUs[i].Name, nil
}

// UUID answers nvml.Lib's query from the Machine.
func (l *NVML) UUID(d nvml.Device) (string, error) {
	i, err := l.dev("nvmlDeviceGetUUID", d)
	if err != nil {
		return "", err
	}
	return l.M.UUID(i), nil
}

// nvmlBusID writes a bus id as NVML does: eight-digit domain, upper case.
func nvmlBusID(sysfs string) string { return "0000" + strings.ToUpper(sysfs) }

// PCIInfo answers nvml.Lib's query from the Machine.
func (l *NVML) PCIInfo(d nvml.Device) (nvml.PCIInfo, error) {
	i, err := l.dev("nvmlDeviceGetPciInfo_v3", d)
	if err != nil {
		return nvml.PCIInfo{}, err
	}
	return nvml.PCIInfo{BusID: nvmlBusID(l.M.GPUs[i].BusID), DeviceID: 0x10de}, nil
}

// links lists GPU i's NVLinks: -1 for a switch link, else the peer.
func (l *NVML) links(i int) []int {
	var out []int
	for k := 0; k < l.M.SwitchLinks[i]; k++ {
		out = append(out, -1)
	}
	for j, n := range l.M.Direct[i] {
		for k := 0; k < n; k++ {
			out = append(out, j)
		}
	}
	return out
}

func (l *NVML) link(fn string, d nvml.Device, link int) (int, int, error) {
	i, err := l.dev(fn, d)
	if err != nil {
		return 0, 0, err
	}
	ls := l.links(i)
	if len(ls) == 0 {
		return 0, 0, nvmlErr(fn, nvml.ReturnNotSupported, "Not Supported")
	}
	if link < 0 || link >= len(ls) {
		return 0, 0, nvmlErr(fn, nvml.ReturnInvalidArg, "Invalid Argument")
	}
	return i, ls[link], nil
}

// NvLinkState answers nvml.Lib's query from the Machine.
func (l *NVML) NvLinkState(d nvml.Device, link int) (bool, error) {
	_, _, err := l.link("nvmlDeviceGetNvLinkState", d, link)
	return err == nil, err
}

// NvLinkRemotePCIInfo answers nvml.Lib's query from the Machine.
func (l *NVML) NvLinkRemotePCIInfo(d nvml.Device, link int) (nvml.RemoteEndpoint, error) {
	_, peer, err := l.link("nvmlDeviceGetNvLinkRemotePciInfo_v2", d, link)
	if err != nil {
		return nvml.RemoteEndpoint{}, err
	}
	var ep nvml.RemoteEndpoint
	if peer < 0 {
		ep = nvml.RemoteEndpoint{BusID: nvmlBusID(switchBusID(link)), DeviceID: 0x22a310de, Type: nvml.RemoteSwitch}
	} else {
		ep = nvml.RemoteEndpoint{BusID: nvmlBusID(l.M.GPUs[peer].BusID), DeviceID: 0x233010de, Type: nvml.RemoteGPU}
	}
	if l.M.OldNVML {
		ep.Type = nvml.RemoteUnknown
	}
	return ep, nil
}

func (l *NVML) pair(fn string, a, b nvml.Device) (int, int, error) {
	i, err := l.dev(fn, a)
	if err != nil {
		return 0, 0, err
	}
	j, err := l.dev(fn, b)
	return i, j, err
}

// P2PStatus answers nvml.Lib's query from the Machine.
func (l *NVML) P2PStatus(a, b nvml.Device, index nvml.P2PCapsIndex) (nvml.P2PStatus, error) {
	i, j, err := l.pair("nvmlDeviceGetP2PStatus", a, b)
	if err != nil {
		return nvml.P2PUnknown, err
	}
	ok := false
	switch index {
	case nvml.P2PRead, nvml.P2PWrite:
		ok = l.M.P2P[i][j]
	case nvml.P2PAtomics:
		ok = l.M.Atomics[i][j]
	case nvml.P2PNvLink:
		ok = l.M.Direct[i][j] > 0 || (l.M.SwitchLinks[i] > 0 && l.M.SwitchLinks[j] > 0)
	default:
		return nvml.P2PUnknown, nvmlErr("nvmlDeviceGetP2PStatus", nvml.ReturnInvalidArg, "Invalid Argument")
	}
	if ok {
		return nvml.P2POK, nil
	}
	return nvml.P2PNotSupported, nil
}

// TopologyCommonAncestor answers nvml.Lib's query from the Machine.
func (l *NVML) TopologyCommonAncestor(a, b nvml.Device) (nvml.TopologyLevel, error) {
	i, j, err := l.pair("nvmlDeviceGetTopologyCommonAncestor", a, b)
	if err != nil {
		return 0, err
	}
	return l.M.Path[i][j], nil
}

// GpuFabricInfo answers nvml.Lib's query from the Machine.
func (l *NVML) GpuFabricInfo(d nvml.Device) (nvml.FabricInfo, error) {
	i, err := l.dev("nvmlDeviceGetGpuFabricInfo", d)
	if err != nil {
		return nvml.FabricInfo{}, err
	}
	if f := l.M.GPUs[i].Fabric; f != nil {
		return *f, nil
	}
	return nvml.FabricInfo{}, nvmlErr("nvmlDeviceGetGpuFabricInfo", nvml.ReturnNotSupported, "Not Supported")
}

var _ nvml.Lib = (*NVML)(nil)

// String names the fake for test output.
func (l *NVML) String() string { return fmt.Sprintf("fake NVML of %s", l.M.Name) }

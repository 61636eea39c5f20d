package topotest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goccl/goccl/internal/cuda"
)

// ErrFake is returned for queries the fake does not know, as a driver
// answers CUDA_ERROR_INVALID_VALUE for attributes it does not have.
var ErrFake = errors.New("topotest: invalid value")

// Driver answers the device queries of cuda.Driver as the machine would.
// Everything else is the embedded nil Driver: topology must not call it.
type Driver struct {
	cuda.Driver
	M *Machine
}

func (d *Driver) gpu(dev cuda.Device) (GPU, error) {
	if dev < 0 || int(dev) >= len(d.M.GPUs) {
		return GPU{}, fmt.Errorf("%w: device %d", ErrFake, dev)
	}
	return d.M.GPUs[dev], nil
}

// DriverVersion answers cuda.Driver's query from the Machine.
func (d *Driver) DriverVersion() (int, error) { return d.M.DriverVersion, nil }

// DeviceCount answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceCount() (int, error) { return len(d.M.GPUs), nil }

// DeviceGet answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceGet(ordinal int) (cuda.Device, error) {
	if ordinal < 0 || ordinal >= len(d.M.GPUs) {
		return 0, fmt.Errorf("%w: ordinal %d", ErrFake, ordinal)
	}
	return cuda.Device(ordinal), nil
}

// DeviceName answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceName(dev cuda.Device) (string, error) {
	g, err := d.gpu(dev)
	return g.Name, err
}

// DeviceUUID answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceUUID(dev cuda.Device) ([16]byte, error) {
	if _, err := d.gpu(dev); err != nil {
		return [16]byte{}, err
	}
	return d.M.uuid(int(dev)), nil
}

// DevicePCIBusID answers in CUDA's own form: upper-case hex.
func (d *Driver) DevicePCIBusID(dev cuda.Device) (string, error) {
	g, err := d.gpu(dev)
	return strings.ToUpper(g.BusID), err
}

// DeviceTotalMem answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceTotalMem(dev cuda.Device) (uint64, error) {
	g, err := d.gpu(dev)
	return g.MemoryBytes, err
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DeviceAttribute answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceAttribute(dev cuda.Device, attr cuda.DeviceAttribute) (int, error) {
	g, err := d.gpu(dev)
	if err != nil {
		return 0, err
	}
	switch attr {
	case cuda.AttrMultiprocessorCount:
		return g.SMs, nil
	case cuda.AttrComputeCapabilityMajor:
		return g.CCMajor, nil
	case cuda.AttrComputeCapabilityMinor:
		return g.CCMinor, nil
	case cuda.AttrUnifiedAddressing:
		return b2i(g.UVA), nil
	case cuda.AttrIntegrated:
		return b2i(g.Integrated), nil
	case cuda.AttrVirtualMemoryManagement:
		return b2i(g.VMM), nil
	case cuda.AttrHandleTypePosixFDSupported:
		return b2i(g.PosixFD), nil
	case cuda.AttrHandleTypeFabricSupported:
		return b2i(g.FabricHandles), nil
	case cuda.AttrMulticastSupported:
		return b2i(g.Multicast), nil
	}
	return 0, fmt.Errorf("%w: attribute %d", ErrFake, attr)
}

// DeviceCanAccessPeer answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceCanAccessPeer(dev, peer cuda.Device) (bool, error) {
	v, err := d.DeviceP2PAttribute(cuda.P2PAccessSupported, dev, peer)
	return v != 0, err
}

// DeviceP2PAttribute answers cuda.Driver's query from the Machine.
func (d *Driver) DeviceP2PAttribute(attr cuda.P2PAttribute, src, dst cuda.Device) (int, error) {
	if _, err := d.gpu(src); err != nil {
		return 0, err
	}
	if _, err := d.gpu(dst); err != nil {
		return 0, err
	}
	if src == dst { // the driver refuses a device with itself
		return 0, fmt.Errorf("%w: P2P attribute of device %d with itself", ErrFake, src)
	}
	switch attr {
	case cuda.P2PAccessSupported:
		return b2i(d.M.P2P[src][dst]), nil
	case cuda.P2PNativeAtomicSupported:
		return b2i(d.M.Atomics[src][dst]), nil
	case cuda.P2PPerformanceRank:
		return 0, nil
	}
	return 0, fmt.Errorf("%w: P2P attribute %d", ErrFake, attr)
}

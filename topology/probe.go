package topology

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/goccl/goccl/internal/cuda"
)

// Probe gathers the facts from src. A machine without a usable CUDA driver
// or without GPUs is not an error: the facts then hold no GPUs and say why
// in NoGPUReason. Facts NVML would add (NVLinks, PCIe paths, fabric) are
// left out with a warning when NVML is missing. Errors are for a driver
// that is present but fails a query the facts cannot do without.
func Probe(ctx context.Context, src Source) (*Facts, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f := &Facts{GPUs: []GPU{}, Links: [][]Link{}, CPU: src.CPU()}
	sys := sysfs{root: src.SysfsRoot()}
	nodes, err := sys.numaNodes()
	if err != nil {
		f.warn("%v", err)
		nodes = []NUMANode{}
	}
	f.NUMA = nodes

	drv, err := src.CUDA()
	if err != nil {
		f.NoGPUReason = noDriverReason(err)
		return f, nil
	}
	n, err := drv.DeviceCount()
	switch {
	case err != nil:
		f.NoGPUReason = "CUDA driver found, but it reports no usable GPU: " + err.Error()
		return f, nil
	case n == 0:
		f.NoGPUReason = "CUDA driver found, but no GPU is visible (check CUDA_VISIBLE_DEVICES)"
		return f, nil
	}
	if v, err := drv.DriverVersion(); err == nil {
		f.DriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	} else {
		f.warn("CUDA driver version: %v", err)
	}

	devs := make([]cuda.Device, n)
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, dev, err := probeGPU(drv, i)
		if err != nil {
			return nil, err
		}
		node, cpus, err := sys.pciNUMA(g.BusID)
		if err != nil {
			f.warn("%v", err)
		}
		g.NUMANode = node
		g.CPUList = cpus
		if g.CPUList == "" && node >= 0 {
			for _, nd := range nodes {
				if nd.ID == node {
					g.CPUList = nd.CPUList
				}
			}
		}
		f.GPUs = append(f.GPUs, g)
		devs[i] = dev
	}

	f.Links = make([][]Link, n)
	for i := range f.Links {
		f.Links[i] = make([]Link, n)
		for j := range f.Links[i] {
			if i == j {
				f.Links[i][j] = Link{Kind: LinkSelf, P2P: true, Atomics: true, Label: "X"}
				continue
			}
			l := Link{Kind: LinkUnknown}
			if l.P2P, err = p2pAttr(drv, cuda.P2PAccessSupported, devs[i], devs[j]); err != nil {
				return nil, err
			}
			if l.Atomics, err = p2pAttr(drv, cuda.P2PNativeAtomicSupported, devs[i], devs[j]); err != nil {
				return nil, err
			}
			f.Links[i][j] = l
		}
	}

	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lib, err := src.NVML()
	if err != nil {
		f.warn("NVML unavailable, NVLink and PCIe paths unknown: %v", err)
	} else {
		probeNVML(f, lib, sys)
	}
	for i := range f.Links {
		for j := range f.Links[i] {
			f.Links[i][j].Label = f.Links[i][j].label()
		}
	}
	return f, nil
}

func (f *Facts) warn(format string, args ...any) {
	f.Warnings = append(f.Warnings, fmt.Sprintf(format, args...))
}

// noDriverReason writes the one line `goccl info` shows on a machine
// without a driver: "no CUDA driver found: <why>", whatever the loader's
// wording around the sentinel.
func noDriverReason(err error) string {
	msg := err.Error()
	if !errors.Is(err, cuda.ErrNoDriver) {
		return "CUDA driver unusable: " + msg
	}
	base := cuda.ErrNoDriver.Error()
	detail := msg
	if i := strings.Index(msg, base); i >= 0 {
		detail = strings.TrimSpace(msg[i+len(base):])
	}
	detail = strings.TrimSpace(strings.TrimPrefix(detail, ":"))
	if strings.HasPrefix(detail, "(") && strings.HasSuffix(detail, ")") {
		detail = detail[1 : len(detail)-1]
	}
	// dlerror already names the file; "lib: lib: why" reads as a stutter.
	if first, rest, ok := strings.Cut(detail, ": "); ok && strings.HasPrefix(rest, first+": ") {
		detail = rest
	}
	if detail == "" {
		return base
	}
	return base + ": " + detail
}

// probeGPU reads one device's identity and capabilities from the driver.
func probeGPU(drv cuda.Driver, i int) (GPU, cuda.Device, error) {
	g := GPU{Index: i, NUMANode: -1}
	wrap := func(what string, err error) error {
		return fmt.Errorf("topology: GPU%d %s: %w", i, what, err)
	}
	dev, err := drv.DeviceGet(i)
	if err != nil {
		return g, 0, wrap("handle", err)
	}
	if g.Name, err = drv.DeviceName(dev); err != nil {
		return g, 0, wrap("name", err)
	}
	uuid, err := drv.DeviceUUID(dev)
	if err != nil {
		return g, 0, wrap("UUID", err)
	}
	g.UUID = formatUUID(uuid)
	bus, err := drv.DevicePCIBusID(dev)
	if err != nil {
		return g, 0, wrap("PCI bus id", err)
	}
	g.BusID = NormalizeBusID(bus)
	if g.MemoryBytes, err = drv.DeviceTotalMem(dev); err != nil {
		return g, 0, wrap("memory size", err)
	}
	for _, a := range []struct {
		attr cuda.DeviceAttribute
		dst  *int
		name string
	}{
		{cuda.AttrMultiprocessorCount, &g.SMs, "SM count"},
		{cuda.AttrComputeCapabilityMajor, &g.CCMajor, "compute capability"},
		{cuda.AttrComputeCapabilityMinor, &g.CCMinor, "compute capability"},
	} {
		if *a.dst, err = drv.DeviceAttribute(dev, a.attr); err != nil {
			return g, 0, wrap(a.name, err)
		}
	}
	// Capability attributes: a driver too old to know one answers an error;
	// that means "not supported", as it would to the transport using it.
	flag := func(attr cuda.DeviceAttribute) bool {
		v, err := drv.DeviceAttribute(dev, attr)
		return err == nil && v != 0
	}
	g.Caps = Caps{
		UVA:       flag(cuda.AttrUnifiedAddressing),
		VMM:       flag(cuda.AttrVirtualMemoryManagement),
		PosixFD:   flag(cuda.AttrHandleTypePosixFDSupported),
		Fabric:    flag(cuda.AttrHandleTypeFabricSupported),
		Multicast: flag(cuda.AttrMulticastSupported),
	}
	// cuIpc* needs unified addressing and a discrete GPU on Linux.
	g.Caps.IPC = g.Caps.UVA && runtime.GOOS == "linux" && !flag(cuda.AttrIntegrated)
	return g, dev, nil
}

func p2pAttr(drv cuda.Driver, attr cuda.P2PAttribute, a, b cuda.Device) (bool, error) {
	v, err := drv.DeviceP2PAttribute(attr, a, b)
	if err != nil {
		return false, fmt.Errorf("topology: P2P attribute %d from device %d to %d: %w", attr, a, b, err)
	}
	return v != 0, nil
}

package topology

import (
	"errors"
	"fmt"

	"github.com/goccl/goccl/internal/nvml"
)

// NVLinkGBs is the nominal bandwidth of one NVLink, per direction, of the
// generation a GPU of compute capability major.minor carries (0: none).
func NVLinkGBs(major, minor int) float64 {
	switch {
	case major >= 10: // NVLink5, Blackwell
		return 50
	case major == 8 && minor >= 6: // NVLink3 bridges on GA10x: 4 links, 112.5 GB/s both ways
		return 14.0625
	case major >= 7: // NVLink2 (Volta), NVLink3 (A100), NVLink4 (Hopper)
		return 25
	case major == 6: // NVLink1, P100
		return 20
	}
	return 0
}

// probeNVML adds what only NVML knows: NVLinks and where they end, PCIe
// path levels and fabric membership. What it cannot learn becomes a
// warning; the facts from CUDA stand.
func probeNVML(f *Facts, lib nvml.Lib, sys sysfs) {
	if v, err := lib.DriverVersion(); err == nil {
		f.NVMLDriver = v
	}
	n := len(f.GPUs)
	byBus := make(map[string]int, n)
	for i, g := range f.GPUs {
		byBus[g.BusID] = i
	}
	devs := make([]nvml.Device, n)
	have := make([]bool, n)
	for i, g := range f.GPUs {
		d, err := lib.DeviceByPCIBusID(g.BusID)
		if err != nil {
			f.warn("GPU%d: NVML has no device at %s: %v", i, g.BusID, err)
			continue
		}
		devs[i], have[i] = d, true
		fi, err := lib.GpuFabricInfo(d)
		switch {
		case err == nil:
			f.GPUs[i].Fabric = &Fabric{
				ClusterUUID: fmt.Sprintf("%x-%x-%x-%x-%x", fi.ClusterUUID[0:4], fi.ClusterUUID[4:6],
					fi.ClusterUUID[6:8], fi.ClusterUUID[8:10], fi.ClusterUUID[10:16]),
				CliqueID: fi.CliqueID,
				State:    fi.State.String(),
			}
		case !errors.Is(err, nvml.ErrNotSupported):
			f.warn("GPU%d: fabric info: %v", i, err)
		}
	}

	// direct[i][j]: NVLinks from GPU i that end at GPU j.
	direct := make([][]int, n)
	for i := range direct {
		direct[i] = make([]int, n)
		if have[i] {
			f.GPUs[i].NVSwitchLinks = countLinks(f, lib, sys, i, devs[i], byBus, direct[i])
		}
	}

	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j || !have[i] || !have[j] {
				continue
			}
			l := &f.Links[i][j]
			if lvl, err := lib.TopologyCommonAncestor(devs[i], devs[j]); err == nil {
				l.Path = PathLevel(lvl.Label())
			} else {
				f.warn("GPU%d-GPU%d: PCIe path: %v", i, j, err)
			}
			rate := NVLinkGBs(minCC(f.GPUs[i], f.GPUs[j]))
			switch nd, si, sj := max(direct[i][j], direct[j][i]), f.GPUs[i].NVSwitchLinks, f.GPUs[j].NVSwitchLinks; {
			case nd > 0:
				l.Kind, l.NVLinks = LinkNVLink, nd
			case si > 0 && sj > 0:
				l.Kind, l.NVLinks = LinkNVSwitch, min(si, sj)
			default:
				l.Kind = LinkPCIe
			}
			l.BandwidthGBs = float64(l.NVLinks) * rate
		}
	}
}

// countLinks walks GPU i's NVLinks, adds those reaching another GPU to
// direct and returns how many reach an NVSwitch.
func countLinks(f *Facts, lib nvml.Lib, sys sysfs, i int, d nvml.Device, byBus map[string]int, direct []int) int {
	switchLinks := 0
	for link := 0; link < nvml.MaxLinks; link++ {
		up, err := lib.NvLinkState(d, link)
		if errors.Is(err, nvml.ErrNotSupported) {
			return switchLinks // a GPU without NVLink
		}
		if err != nil || !up {
			continue // links past the device's count answer invalid argument
		}
		ep, err := lib.NvLinkRemotePCIInfo(d, link)
		if err != nil {
			f.warn("GPU%d NVLink %d: remote end: %v", i, link, err)
			continue
		}
		bus := NormalizeBusID(ep.BusID)
		j, isGPU := byBus[bus]
		switch ep.Type {
		case nvml.RemoteGPU:
			// A GPU hidden from CUDA (CUDA_VISIBLE_DEVICES) is not a peer.
			if isGPU && j != i {
				direct[j]++
			}
		case nvml.RemoteSwitch:
			switchLinks++
		case nvml.RemoteUnknown:
			// Older drivers cannot say: a visible GPU is a GPU, the PCI
			// class tells an NVSwitch.
			if isGPU && j != i {
				direct[j]++
			} else if c, err := sys.pciClass(bus); err == nil && c == nvml.NVSwitchPCIClass {
				switchLinks++
			}
		}
	}
	return switchLinks
}

func minCC(a, b GPU) (int, int) {
	if a.CCMajor < b.CCMajor || (a.CCMajor == b.CCMajor && a.CCMinor < b.CCMinor) {
		return a.CCMajor, a.CCMinor
	}
	return b.CCMajor, b.CCMinor
}

// label is nvidia-smi topo -m's cell for the link.
func (l Link) label() string {
	switch l.Kind {
	case LinkSelf:
		return "X"
	case LinkNVLink, LinkNVSwitch:
		return fmt.Sprintf("NV%d", l.NVLinks)
	case LinkPCIe:
		if l.Path != "" {
			return string(l.Path)
		}
		return "PCIe"
	}
	return "?"
}

// ProbeBuses gives the facts of the GPUs at the PCI bus ids buses, in that
// order, from NVML alone: NVML sees every GPU of the machine, whatever
// CUDA_VISIBLE_DEVICES hides from this process's CUDA, so that a rank can
// tell the links between its GPU and GPUs only its peers see. NVML does
// not give the compute capability, which sets the NVLink rate: each GPU
// is taken to be of ccMajor.ccMinor (a visible one's). The facts hold no
// P2P or atomics (CUDA's to tell); an error is NVML's absence.
func ProbeBuses(src Source, buses []string, ccMajor, ccMinor int) (*Facts, error) {
	lib, err := src.NVML()
	if err != nil {
		return nil, fmt.Errorf("topology: NVML: %w", err)
	}
	n := len(buses)
	f := &Facts{GPUs: make([]GPU, n), Links: make([][]Link, n), NUMA: []NUMANode{}}
	for i, b := range buses {
		f.GPUs[i] = GPU{Index: i, BusID: NormalizeBusID(b), CCMajor: ccMajor, CCMinor: ccMinor, NUMANode: -1}
		f.Links[i] = make([]Link, n)
		for j := range f.Links[i] {
			f.Links[i][j] = Link{Kind: LinkUnknown}
			if i == j {
				f.Links[i][j] = Link{Kind: LinkSelf, P2P: true, Atomics: true}
			}
		}
	}
	probeNVML(f, lib, sysfs{root: src.SysfsRoot()})
	for i := range f.Links {
		for j := range f.Links[i] {
			f.Links[i][j].Label = f.Links[i][j].label()
		}
	}
	return f, nil
}

// ProbeSystemBuses is ProbeBuses on this machine.
func ProbeSystemBuses(buses []string, ccMajor, ccMinor int) (*Facts, error) {
	src := &systemSource{}
	defer src.close()
	return ProbeBuses(src, buses, ccMajor, ccMinor)
}

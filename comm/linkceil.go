package comm

import (
	"context"
	"math"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/topology"
)

// The link ceiling of a communicator: the nominal bandwidth per
// direction of the slowest link its ranks' GPUs use, which Stats and the
// metrics compare the bus bandwidth with. Inside a node it is the slowest
// link between the GPUs of the communicator's ranks there (a Split child
// of two ranks on an NVLink pair has that pair's), the GPUs told apart by
// PCI bus id, since CUDA_VISIBLE_DEVICES may number them differently on
// every rank; across nodes it is at most the slowest inter-node line rate
// any rank reported at init: that of the RDMA port or interface its
// backend's network library takes (NCCL for the GPU backend, UCX for the
// host one; topology.ChooseNetPort). Unknown (0) where a pair has no
// NVLink (PCIe is not estimated), where the ranks share one GPU, or
// across nodes where a rank's rate is unknown. Ranks without GPUs (the
// host backend) have the inter-node rate across nodes and no ceiling
// inside one.

// linkFacts probes this node's GPUs and links; tests replace it.
var linkFacts = func() (*topology.Facts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return topology.ProbeSystem(ctx)
}

// busFacts gives the links between the GPUs at buses from NVML, for GPUs
// this process's CUDA does not show; tests replace it.
var busFacts = topology.ProbeSystemBuses

// deviceBusID is the PCI bus id of CUDA device ordinal device on the GPU
// backend, "" elsewhere or unknown (host jobs never load the driver);
// tests replace it.
var deviceBusID = func(backend string, device int) string {
	if backend != BackendGPU || device < 0 {
		return ""
	}
	drv, err := cuda.Load()
	if err != nil {
		return ""
	}
	dev, err := drv.DeviceGet(device)
	if err != nil {
		return ""
	}
	bus, err := drv.DevicePCIBusID(dev)
	if err != nil {
		return ""
	}
	return topology.NormalizeBusID(bus)
}

// netGBs is the line rate, GB/s per direction, of the port this rank's
// traffic to other nodes takes (0 unknown), ip being the interface its
// bootstrap uses; tests replace it.
var netGBs = func(me linkSelf, ip netip.Addr) float64 {
	return interNodeGBs("/sys", me.backend, os.Getenv, interfaceName(ip))
}

// linkSelf is what a rank tells the others at init for the ceiling.
type linkSelf struct {
	device  int    // CUDA ordinal, -1 none
	bus     string // its PCI bus id, "" unknown
	backend string // whose network the rate is looked up for; "" none
}

// selfLink is this rank's linkSelf. The bus id and rate are looked up
// only where the recorder, which alone uses the ceiling, is on.
func selfLink(backend string, device int, recorder bool) linkSelf {
	me := linkSelf{device: device}
	if recorder && (backend == BackendGPU || backend == BackendHost) {
		me.bus, me.backend = deviceBusID(backend, device), backend
		if len(me.bus) > maxBusID {
			me.bus = "" // not a bus id; it would not fit the exchange
		}
	}
	return me
}

// netMbps is the rate this rank reports, in the exchange's Mb/s.
func (me linkSelf) netMbps(ip netip.Addr) uint32 {
	if me.backend == "" {
		return 0
	}
	g := netGBs(me, ip)
	if !(g > 0) || g*8000 > math.MaxUint32 {
		return 0
	}
	return uint32(math.Round(g * 8000))
}

// interNodeGBs is the rate of the port backend's network library takes
// between nodes, from the sysfs under root and the settings getenv reads;
// iface is the bootstrap's interface, taken where nothing else is.
func interNodeGBs(root, backend string, getenv func(string) string, iface string) float64 {
	stack := topology.NetUCX
	if backend == BackendGPU {
		stack = topology.NetNCCL
	}
	ports, _ := topology.NetPorts(root)
	c, ok := topology.ChooseNetPort(ports, stack, getenv, iface)
	if !ok {
		return 0
	}
	return c.GBs
}

// linkCeiling is c's link ceiling, 0 unknown.
func (c *Comm) linkCeiling() float64 {
	rp := c.rescue
	if rp == nil || len(rp.nodes) != c.size || len(rp.devices) != c.size || len(rp.buses) != c.size || len(rp.netMbps) != c.size {
		return 0
	}
	inter := 0.0
	if multiNode(rp.nodes) {
		inter = slowestNet(rp.netMbps)
	}
	f, err := linkFacts()
	if err != nil {
		return 0
	}
	gpus := make([]gpuRef, c.size)
	for r := range gpus {
		gpus[r] = gpuRef{ordinal: rp.devices[r], bus: rp.buses[r]}
	}
	return commCeiling(f, rp.nodes, gpus, c.rank, inter)
}

// netCeiling is the ceiling of a communicator of host memory (the host
// backend): across nodes the slowest inter-node rate, 0 inside a node,
// whose memory bandwidth is not estimated.
func (c *Comm) netCeiling() float64 {
	rp := c.rescue
	if rp == nil || len(rp.nodes) != c.size || len(rp.netMbps) != c.size || !multiNode(rp.nodes) {
		return 0
	}
	return slowestNet(rp.netMbps)
}

// slowestNet is the slowest rate the ranks reported, GB/s; 0 where one
// is unknown.
func slowestNet(mbps []uint32) float64 {
	low := uint32(math.MaxUint32)
	for _, m := range mbps {
		low = min(low, m)
	}
	if len(mbps) == 0 || low == 0 {
		return 0
	}
	return float64(low) / 8000
}

func multiNode(nodes []string) bool {
	for _, n := range nodes {
		if n != nodes[0] {
			return true
		}
	}
	return false
}

// gpuRef is a rank's GPU as init's exchange tells it: its CUDA ordinal in
// the rank's own numbering and its PCI bus id ("" unknown).
type gpuRef struct {
	ordinal int
	bus     string
}

// commCeiling is the ceiling of the ranks whose nodes and GPUs are given,
// seen from rank, whose node's facts f are; inter is the slowest
// inter-node rate (0 unknown), used when the ranks span nodes. A GPU is
// found in f by its bus id; one without (its rank did not look it up) by
// its ordinal, as if every rank numbered the GPUs alike; one f lacks
// (hidden from this process's CUDA) through busFacts. The other nodes'
// NVLinks are taken to be like rank's node's.
func commCeiling(f *topology.Facts, nodes []string, gpus []gpuRef, rank int, inter float64) float64 {
	byBus := map[string]int{}
	for i, g := range f.GPUs {
		if g.BusID != "" {
			byBus[topology.NormalizeBusID(g.BusID)] = i
		}
	}
	var local []localGPU
	hidden := false
	for r, n := range nodes {
		if n != nodes[rank] {
			continue
		}
		g := localGPU{idx: -1}
		if b := topology.NormalizeBusID(gpus[r].bus); b != "" {
			if i, ok := byBus[b]; ok {
				g.idx = i
			} else {
				g.bus, hidden = b, true
			}
		} else if d := gpus[r].ordinal; d >= 0 && d < len(f.GPUs) {
			g.idx = d
		} else {
			return 0
		}
		dup := false
		for _, h := range local {
			dup = dup || h == g
		}
		if !dup {
			local = append(local, g)
		}
	}
	link := func(a, b localGPU) (topology.Link, bool) { return f.Link(a.idx, b.idx) }
	if hidden {
		nf, ok := hiddenFacts(f, local)
		if !ok {
			return 0
		}
		pos := map[localGPU]int{}
		for i, g := range local {
			pos[g] = i
		}
		link = func(a, b localGPU) (topology.Link, bool) { return nf.Link(pos[a], pos[b]) }
	}
	ceil := math.Inf(1)
	for i, a := range local {
		for _, b := range local[i+1:] {
			l, ok := link(a, b)
			if !ok || l.BandwidthGBs <= 0 {
				return 0
			}
			ceil = min(ceil, l.BandwidthGBs)
		}
	}
	if multiNode(nodes) {
		if inter <= 0 {
			return 0
		}
		ceil = min(ceil, inter)
	}
	if math.IsInf(ceil, 1) {
		return 0 // one GPU: no link between the ranks
	}
	return ceil
}

// localGPU is a GPU of the ranks on this node: an index into this
// process's facts, or -1 with the bus id of one they lack.
type localGPU struct {
	idx int
	bus string
}

// hiddenFacts asks NVML for the links between the local GPUs, some of
// which f (this process's CUDA) lacks, in local's order. Their NVLink
// generation is taken from a GPU f has.
func hiddenFacts(f *topology.Facts, local []localGPU) (*topology.Facts, bool) {
	if len(f.GPUs) == 0 {
		return nil, false
	}
	cc := f.GPUs[0]
	buses := make([]string, len(local))
	for i, g := range local {
		buses[i] = g.bus
		if g.idx >= 0 {
			cc = f.GPUs[g.idx]
			if buses[i] = f.GPUs[g.idx].BusID; buses[i] == "" {
				return nil, false
			}
		}
	}
	nf, err := busFacts(buses, cc.CCMajor, cc.CCMinor)
	if err != nil || len(nf.GPUs) != len(local) {
		return nil, false
	}
	return nf, true
}

// interfaceName is the interface with address ip, "" none (no such
// address, or ip invalid).
func interfaceName(ip netip.Addr) string {
	ifs, err := net.Interfaces()
	if err != nil || !ip.IsValid() {
		return ""
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err == nil && p.Addr().Unmap() == ip.Unmap() {
				return ifc.Name
			}
		}
	}
	return ""
}

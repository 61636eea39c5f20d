package comm

import (
	"context"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/topology"
)

// The link ceiling of a communicator: the nominal bandwidth per
// direction of the slowest link its ranks' GPUs use, which Stats and the
// metrics compare the bus bandwidth with. Inside a node it is the slowest
// link between the GPUs of the communicator's ranks there (a Split child
// of two ranks on an NVLink pair has that pair's); across nodes it is at
// most the inter-node leg's rate, the line rate of the interface the
// ranks reach each other through, where the system tells it. Unknown (0)
// where a pair has no NVLink (PCIe is not estimated), where the ranks
// share one GPU, or across nodes without a known rate.

// linkFacts probes this node's GPUs and links; tests replace it.
var linkFacts = func() (*topology.Facts, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return topology.ProbeSystem(ctx)
}

// netGBs is the line rate, GB/s per direction, of the interface with
// address ip (0 unknown); tests replace it.
var netGBs = interfaceGBs

// linkCeiling is c's link ceiling, 0 unknown.
func (c *Comm) linkCeiling() float64 {
	rp := c.rescue
	if rp == nil || len(rp.nodes) != c.size || len(rp.devices) != c.size {
		return 0
	}
	f, err := linkFacts()
	if err != nil {
		return 0
	}
	inter := 0.0
	if multiNode(rp.nodes) {
		inter = netGBs(rp.ip)
	}
	return commCeiling(f, rp.nodes, rp.devices, c.rank, inter)
}

func multiNode(nodes []string) bool {
	for _, n := range nodes {
		if n != nodes[0] {
			return true
		}
	}
	return false
}

// commCeiling is the ceiling of the ranks whose nodes and CUDA ordinals
// (as rank's node's facts f number them) are given, seen from rank; inter
// is the inter-node leg's rate (0 unknown), used when the ranks span
// nodes. The other nodes are taken to be built like rank's.
func commCeiling(f *topology.Facts, nodes []string, devices []int, rank int, inter float64) float64 {
	var local []int // the distinct GPUs of the ranks on rank's node
	for r, n := range nodes {
		if n != nodes[rank] {
			continue
		}
		d := devices[r]
		if d < 0 || d >= len(f.GPUs) {
			return 0
		}
		if !containsInt(local, d) {
			local = append(local, d)
		}
	}
	ceil := math.Inf(1)
	for i, a := range local {
		for _, b := range local[i+1:] {
			l, ok := f.Link(a, b)
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

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// interfaceGBs reads the line rate of the interface with address ip from
// sysfs (Mb/s, as the driver reports it); 0 where it does not say
// (loopback, virtual interfaces, no such address).
func interfaceGBs(ip netip.Addr) float64 {
	ifs, err := net.Interfaces()
	if err != nil || !ip.IsValid() {
		return 0
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil || p.Addr().Unmap() != ip.Unmap() {
				continue
			}
			b, err := os.ReadFile("/sys/class/net/" + ifc.Name + "/speed")
			if err != nil {
				return 0
			}
			mbps, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || mbps <= 0 {
				return 0
			}
			return float64(mbps) / 8000
		}
	}
	return 0
}

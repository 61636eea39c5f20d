package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology"
)

// view is the facts a process with CUDA_VISIBLE_DEVICES=cvd probes on the
// physical node phys: its ordinal o is phys's GPU cvd[o].
func view(phys *topology.Facts, cvd []int) *topology.Facts {
	f := &topology.Facts{GPUs: make([]topology.GPU, len(cvd)), Links: make([][]topology.Link, len(cvd))}
	for o, p := range cvd {
		f.GPUs[o] = phys.GPUs[p]
		f.GPUs[o].Index = o
		f.Links[o] = make([]topology.Link, len(cvd))
		for q, pq := range cvd {
			f.Links[o][q] = phys.Links[p][pq]
		}
	}
	return f
}

// nvmlOf answers busFacts as NVML would on phys, whose every GPU it sees.
func nvmlOf(phys *topology.Facts) func([]string, int, int) (*topology.Facts, error) {
	return func(buses []string, major, minor int) (*topology.Facts, error) {
		var cvd []int
		for _, b := range buses {
			found := false
			for i, g := range phys.GPUs {
				if g.BusID == b {
					cvd, found = append(cvd, i), true
				}
			}
			if !found {
				return nil, errors.New("no GPU at " + b)
			}
		}
		return view(phys, cvd), nil
	}
}

// With CUDA_VISIBLE_DEVICES differing per rank, ordinals name different
// GPUs on different ranks: the bus ids tell them apart, from every rank's
// view alike; GPUs a rank's CUDA does not show are looked up through
// NVML. byOrdinal is what ordinals alone gave, from rank 0's view.
func TestCeilingByBusID(t *testing.T) {
	oldBus := busFacts
	t.Cleanup(func() { busFacts = oldBus })
	busFacts = nvmlOf(twoPairs)
	all := []int{0, 1, 2, 3}
	cases := []struct {
		name      string
		cvd       [][]int // each rank's CUDA_VISIBLE_DEVICES
		ords      []int   // each rank's ordinal in its own numbering
		nodes     []string
		inter     float64
		want      float64
		byOrdinal float64
	}{
		{"numbered alike", [][]int{all, all}, []int{0, 1}, nil, 0, 450, 450},
		{"one rank reversed: the same GPU", [][]int{all, {3, 2, 1, 0}}, []int{0, 3}, nil, 0, 0, 50},
		{"one rank reversed: a pair", [][]int{all, {3, 2, 1, 0}}, []int{0, 2}, nil, 0, 450, 50},
		{"one GPU each, a pair", [][]int{{0}, {1}}, []int{0, 0}, nil, 0, 450, 0},
		{"one GPU each, across the pairs", [][]int{{1}, {2}}, []int{0, 0}, nil, 0, 50, 0},
		{"one GPU each, four ranks", [][]int{{3}, {2}, {1}, {0}}, []int{0, 0, 0, 0}, nil, 0, 50, 0},
		{"pairs swapped on two ranks", [][]int{{2, 3, 0, 1}, {2, 3, 0, 1}, all, all}, []int{0, 1, 0, 1}, nil, 0, 50, 450},
		{"two of a pair, each its own order", [][]int{{2, 3}, {3, 2}}, []int{0, 0}, nil, 0, 450, 0},
		{"two nodes, one GPU each rank", [][]int{{2}, {3}, {0}, {1}}, []int{0, 0, 0, 0}, []string{"a", "a", "b", "b"}, 25, 25, 25},
		{"two nodes, across the pairs", [][]int{{1}, {2}, {2}, {1}}, []int{0, 0, 0, 0}, []string{"a", "a", "b", "b"}, 100, 50, 100},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes := tc.nodes
			if nodes == nil {
				nodes = make([]string, len(tc.cvd))
			}
			gpus := make([]gpuRef, len(tc.cvd))
			for r, cvd := range tc.cvd {
				gpus[r] = gpuRef{ordinal: tc.ords[r], bus: busOf(cvd[tc.ords[r]])}
			}
			for r := range tc.cvd {
				assert.Equal(t, tc.want, commCeiling(view(twoPairs, tc.cvd[r]), nodes, gpus, r, tc.inter), "from rank %d", r)
			}
			assert.Equal(t, tc.byOrdinal, commCeiling(view(twoPairs, tc.cvd[0]), nodes, ords(tc.ords...), 0, tc.inter), "by ordinal")
		})
	}
}

// Where a rank did not tell its bus id, its ordinal counts in this rank's
// numbering, as before; a GPU NVML cannot tell about leaves the ceiling
// unknown; so does a bus id no GPU has.
func TestCeilingByBusIDFallbacks(t *testing.T) {
	oldBus := busFacts
	t.Cleanup(func() { busFacts = oldBus })
	busFacts = nvmlOf(twoPairs)
	f := view(twoPairs, []int{0, 1, 2, 3})
	one := []string{"a", "a"}
	assert.Equal(t, 450.0, commCeiling(f, one, []gpuRef{{ordinal: 1}, {ordinal: 0, bus: busOf(0)}}, 0, 0), "one rank by ordinal")
	assert.Equal(t, 0.0, commCeiling(f, one, []gpuRef{{ordinal: 0}, {ordinal: 0, bus: busOf(0)}}, 0, 0), "the same GPU either way")
	assert.Equal(t, 450.0, commCeiling(f, one, []gpuRef{{ordinal: 9, bus: "0000:48:00.0"}, {ordinal: 0, bus: "0000:38:00.0"}}, 1, 0),
		"a bus id wins over an ordinal the facts lack")
	assert.Equal(t, 450.0, commCeiling(f, one, []gpuRef{{bus: "00000000:48:00.0"}, {bus: "0000:38:00.0"}}, 1, 0), "NVML's bus form")

	mine := view(twoPairs, []int{0})
	hidden := []gpuRef{{ordinal: 0, bus: busOf(0)}, {ordinal: 0, bus: busOf(1)}}
	assert.Equal(t, 450.0, commCeiling(mine, one, hidden, 0, 0))
	busFacts = func([]string, int, int) (*topology.Facts, error) { return nil, errors.New("no NVML") }
	assert.Equal(t, 0.0, commCeiling(mine, one, hidden, 0, 0), "NVML unavailable")
	busFacts = nvmlOf(twoPairs)
	assert.Equal(t, 0.0, commCeiling(mine, one, []gpuRef{{bus: busOf(0)}, {bus: "0000:99:00.0"}}, 0, 0), "no GPU at the bus")

	// The hidden GPU's NVLink generation is the visible one's.
	var cc []int
	busFacts = func(b []string, major, minor int) (*topology.Facts, error) {
		cc = []int{major, minor}
		return nvmlOf(twoPairs)(b, major, minor)
	}
	commCeiling(mine, one, hidden, 0, 0)
	assert.Equal(t, []int{9, 0}, cc)
}

// Across nodes the ceiling is at most the slowest rate any rank reported:
// each node's adapter may differ; one rank's unknown rate leaves it unknown.
func TestLinkCeilingAcrossNodes(t *testing.T) {
	oldFacts := linkFacts
	t.Cleanup(func() { linkFacts = oldFacts })
	linkFacts = func() (*topology.Facts, error) { return twoPairs, nil }
	two := []string{"a", "a", "b", "b"}
	cases := []struct {
		name  string
		nodes []string
		mbps  []uint32
		want  float64
	}{
		{"NDR on both nodes", two, []uint32{400000, 400000, 400000, 400000}, 50},
		{"NDR and HDR nodes", two, []uint32{400000, 400000, 200000, 200000}, 25},
		{"one rank's adapter slower", two, []uint32{400000, 100000, 400000, 400000}, 12.5},
		{"a rate above NVLink", two, []uint32{4000000, 4000000, 4000000, 4000000}, 450},
		{"one rank's rate unknown", two, []uint32{400000, 400000, 0, 400000}, 0},
		{"one node: rates do not count", []string{"a", "a", "a", "a"}, []uint32{8000, 0, 8000, 8000}, 50},
		{"no GPUs (host memory): the network", two, []uint32{400000, 400000, 200000, 200000}, 25},
		{"no GPUs, a rate unknown", two, []uint32{400000, 400000, 0, 200000}, 0},
		{"no GPUs, one node: unknown", []string{"a", "a", "a", "a"}, []uint32{8000, 8000, 8000, 8000}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			devices := []int{0, 1, 0, 1}
			if !multiNode(tc.nodes) {
				devices = []int{0, 1, 2, 3}
			}
			host := strings.HasPrefix(tc.name, "no GPUs")
			if host {
				devices = []int{-1, -1, -1, -1}
			}
			rp := &rescuePoint{nodes: tc.nodes, devices: devices, buses: make([]string, 4), netMbps: tc.mbps}
			for r := range 4 {
				c := &Comm{rank: r, size: 4, rescue: rp}
				if host {
					assert.Equal(t, tc.want, c.netCeiling(), "rank %d", r)
					continue
				}
				assert.Equal(t, tc.want, c.linkCeiling(), "rank %d", r)
			}
		})
	}
}

// The rate a rank reports is that of the port its backend's network
// library takes, read from a fake /sys.
func TestInterNodeGBs(t *testing.T) {
	cases := []struct {
		name    string
		root    string
		backend string
		env     map[string]string
		iface   string
		want    float64
	}{
		{"gpu: NDR, the fastest active port", "ndr", BackendGPU, nil, "eth0", 50},
		{"gpu: NCCL_IB_HCA", "ndr", BackendGPU, map[string]string{"NCCL_IB_HCA": "=mlx5_1:1"}, "eth0", 25},
		{"gpu: an inactive port named, sockets", "ndr", BackendGPU, map[string]string{"NCCL_IB_HCA": "mlx5_2"}, "eth0", 3.125},
		{"gpu: IB off", "ndr", BackendGPU, map[string]string{"NCCL_IB_DISABLE": "1"}, "eth0", 3.125},
		{"gpu: sockets on IPoIB", "ndr", BackendGPU, map[string]string{"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=ib1"}, "eth0", 25},
		{"host: the fastest active port", "ndr", BackendHost, nil, "eth0", 50},
		{"host: UCX_NET_DEVICES", "ndr", BackendHost, map[string]string{"UCX_NET_DEVICES": "mlx5_1:1"}, "eth0", 25},
		{"host: TCP only", "ndr", BackendHost, map[string]string{"UCX_TLS": "tcp,self"}, "eth0", 3.125},
		{"gpu: no RDMA, the bootstrap's interface", "eth", BackendGPU, nil, "eth0", 12.5},
		{"host: no RDMA, UCX_NET_DEVICES", "eth", BackendHost, map[string]string{"UCX_NET_DEVICES": "eth0"}, "", 12.5},
		{"the loopback", "eth", BackendHost, nil, "lo", 0},
		{"nothing known", "eth", BackendGPU, nil, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := interNodeGBs("testdata/sys/"+tc.root, tc.backend, func(k string) string { return tc.env[k] }, tc.iface)
			assert.Equal(t, tc.want, got)
		})
	}
}

// Init's exchange carries every rank's bus id and rate: here the ranks'
// ordinals 0-3 are GPUs 0, 2, 1, 3 (as CUDA_VISIBLE_DEVICES=0,2,1,3 would
// have them), so the children of ranks {0,1} sit across the pairs and
// those of {0,2} on a pair, the reverse of what the ordinals say.
func TestSplitCeilingByBusID(t *testing.T) {
	oldFacts, oldNet, oldBus := linkFacts, netGBs, deviceBusID
	t.Cleanup(func() { linkFacts, netGBs, deviceBusID = oldFacts, oldNet, oldBus })
	linkFacts = func() (*topology.Facts, error) { return twoPairs, nil }
	perm := []int{0, 2, 1, 3}
	deviceBusID = func(_ string, d int) string { return busOf(perm[d]) }
	netGBs = func(me linkSelf, _ netip.Addr) float64 { return 25 + float64(me.device) }

	ctx := context.Background()
	comms, err := InitAll(ctx, []int{0, 1, 2, 3}, Options{Backend: BackendHost, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	for _, c := range comms {
		rp := c.rescue
		assert.Equal(t, []string{busOf(0), busOf(2), busOf(1), busOf(3)}, rp.buses, "rank %d", c.Rank())
		assert.Equal(t, []uint32{200000, 208000, 216000, 224000}, rp.netMbps, "rank %d", c.Rank())
		assert.Equal(t, 50.0, c.linkCeiling())
	}
	for _, split := range []struct {
		name  string
		color func(r int) int
		want  float64
	}{
		{"ordinal pairs", func(r int) int { return r / 2 }, 50},   // GPUs {0,2} {1,3}
		{"ordinal across", func(r int) int { return r % 2 }, 450}, // GPUs {0,1} {2,3}
	} {
		t.Run(split.name, func(t *testing.T) {
			kids := splitEach(t, ctx, comms, split.color)
			for r, k := range kids {
				assert.Equal(t, split.want, k.linkCeiling(), "parent rank %d", r)
				assert.NoError(t, k.Close())
			}
		})
	}
}

// A rank looks its bus id and rate up only where the recorder (the
// ceiling's one user) is on and the backend is one of goccl's; the rate
// travels in Mb/s, an impossible one as unknown.
func TestSelfLink(t *testing.T) {
	oldNet, oldBus := netGBs, deviceBusID
	t.Cleanup(func() { netGBs, deviceBusID = oldNet, oldBus })
	asked := 0
	deviceBusID = func(b string, d int) string { asked++; return b + ":" + fmt.Sprint(d) }
	rate := 50.0
	netGBs = func(linkSelf, netip.Addr) float64 { return rate }
	ip := netip.MustParseAddr("10.0.0.1")

	cases := []struct {
		name     string
		backend  string
		recorder bool
		want     linkSelf
		mbps     uint32
	}{
		{"gpu", BackendGPU, true, linkSelf{device: 3, bus: "gpu:3", backend: BackendGPU}, 400000},
		{"host", BackendHost, true, linkSelf{device: 3, bus: "host:3", backend: BackendHost}, 400000},
		{"recorder off", BackendGPU, false, linkSelf{device: 3}, 0},
		{"a custom backend", "custom", true, linkSelf{device: 3}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked = 0
			me := selfLink(tc.backend, 3, tc.recorder)
			assert.Equal(t, tc.want, me)
			assert.Equal(t, tc.want.backend != "", asked == 1)
			assert.Equal(t, tc.mbps, me.netMbps(ip))
		})
	}
	deviceBusID = func(string, int) string { return strings.Repeat("0", maxBusID+1) }
	assert.Empty(t, selfLink(BackendGPU, 0, true).bus, "too long for the exchange")
	me := selfLink(BackendGPU, 0, true)
	for _, r := range []struct {
		gbs  float64
		mbps uint32
	}{{53.125 / 8, 53125}, {2.5 / 8, 2500}, {0, 0}, {-1, 0}, {math.NaN(), 0}, {math.Inf(1), 0}, {1e9, 0}} {
		rate = r.gbs
		assert.Equal(t, r.mbps, me.netMbps(ip), "%v GB/s", r.gbs)
	}
}

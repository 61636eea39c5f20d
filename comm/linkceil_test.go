package comm

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/topology"
)

// fakeFacts is a node of n GPUs whose links are gbs[a][b] GB/s of NVLink
// (0: PCIe only).
func fakeFacts(gbs [][]float64) *topology.Facts {
	f := &topology.Facts{GPUs: make([]topology.GPU, len(gbs)), Links: make([][]topology.Link, len(gbs))}
	for a := range gbs {
		f.GPUs[a].Index = a
		f.GPUs[a].BusID = busOf(a)
		f.GPUs[a].CCMajor = 9
		f.Links[a] = make([]topology.Link, len(gbs))
		for b, g := range gbs[a] {
			switch {
			case a == b:
				f.Links[a][b] = topology.Link{Kind: topology.LinkSelf}
			case g > 0:
				f.Links[a][b] = topology.Link{Kind: topology.LinkNVLink, NVLinks: int(g / 25), BandwidthGBs: g}
			default:
				f.Links[a][b] = topology.Link{Kind: topology.LinkPCIe}
			}
		}
	}
	return f
}

// busOf is the PCI bus id of the fake node's physical GPU a.
func busOf(a int) string { return fmt.Sprintf("0000:%02x:00.0", 0x18+0x10*a) }

// ords are ranks' GPUs by CUDA ordinal only, as a rank that did not look
// up its bus id tells them.
func ords(ds ...int) []gpuRef {
	out := make([]gpuRef, len(ds))
	for i, d := range ds {
		out[i] = gpuRef{ordinal: d}
	}
	return out
}

// Two NV18 pairs (0-1, 2-3) joined by NV2 links.
var twoPairs = fakeFacts([][]float64{
	{0, 450, 50, 50},
	{450, 0, 50, 50},
	{50, 50, 0, 450},
	{50, 50, 450, 0},
})

// The ceiling is the slowest link between the communicator's GPUs, not
// the node's; across nodes at most the inter-node rate, unknown without it.
func TestCommCeiling(t *testing.T) {
	one := []string{"a", "a", "a", "a"}
	cases := []struct {
		name    string
		f       *topology.Facts
		nodes   []string
		devices []gpuRef
		rank    int
		inter   float64
		want    float64
	}{
		{"the whole node", twoPairs, one, ords(0, 1, 2, 3), 0, 0, 50},
		{"a child on an NV18 pair", twoPairs, one[:2], ords(0, 1), 1, 0, 450},
		{"the other pair", twoPairs, one[:2], ords(3, 2), 0, 0, 450},
		{"a child across the pairs", twoPairs, one[:2], ords(1, 2), 0, 0, 50},
		{"three of four", twoPairs, one[:3], ords(2, 3, 0), 2, 0, 50},
		{"ranks sharing a GPU", twoPairs, one[:2], ords(1, 1), 0, 0, 0},
		{"two ranks on a GPU, one on its pair", twoPairs, one[:3], ords(0, 0, 1), 0, 0, 450},
		{"one rank", twoPairs, one[:1], ords(2), 0, 0, 0},
		{"a pair over PCIe", fakeFacts([][]float64{{0, 0}, {0, 0}}), one[:2], ords(0, 1), 0, 0, 0},
		{"a device the facts lack", twoPairs, one[:2], ords(0, 4), 0, 0, 0},
		{"no device", twoPairs, one[:2], ords(-1, 0), 0, 0, 0},
		{"two nodes, rate known", twoPairs, []string{"a", "a", "b", "b"}, ords(0, 1, 0, 1), 2, 25, 25},
		{"two nodes, rate above NVLink", twoPairs, []string{"a", "a", "b", "b"}, ords(0, 1, 0, 1), 0, 900, 450},
		{"two nodes, this node's slow pair", twoPairs, []string{"a", "a", "b", "b"}, ords(1, 2, 0, 1), 0, 100, 50},
		{"two nodes, rate unknown", twoPairs, []string{"a", "a", "b", "b"}, ords(0, 1, 0, 1), 0, 0, 0},
		{"a rank a node", twoPairs, []string{"a", "b"}, ords(0, 0), 1, 25, 25},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, commCeiling(tc.f, tc.nodes, tc.devices, tc.rank, tc.inter))
		})
	}
}

// TestSplitCeiling: the devices travel with init's exchange, so that a
// Split child knows its own GPUs: a child on an NVLink pair has that
// pair's ceiling, one across the pairs the slow link's, the parent the
// node's slowest.
func TestSplitCeiling(t *testing.T) {
	oldFacts, oldNet := linkFacts, netGBs
	t.Cleanup(func() { linkFacts, netGBs = oldFacts, oldNet })
	linkFacts = func() (*topology.Facts, error) { return twoPairs, nil }
	netGBs = func(linkSelf, netip.Addr) float64 { return 12.5 }

	ctx := context.Background()
	comms, err := InitAll(ctx, []int{0, 1, 2, 3}, Options{Backend: BackendHost, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	for _, c := range comms {
		assert.Equal(t, 50.0, c.linkCeiling(), "rank %d of the parent", c.Rank())
	}
	for _, split := range []struct {
		name  string
		color func(r int) int
		want  float64
	}{
		{"pairs", func(r int) int { return r / 2 }, 450}, // {0,1} {2,3}
		{"across", func(r int) int { return r % 2 }, 50}, // {0,2} {1,3}
	} {
		t.Run(split.name, func(t *testing.T) {
			kids := splitEach(t, ctx, comms, split.color)
			for r, k := range kids {
				assert.Equal(t, 2, k.Size())
				assert.Equal(t, split.want, k.linkCeiling(), "parent rank %d", r)
			}
			// Stats (and so the metrics) compare with it where the
			// backend's GPUs set it; the host backend stands in for one.
			for _, k := range kids {
				k.obs.gpu = true
			}
			runCalls(t, []*Comm{kids[0], partner(kids, 0, split.color)}, []call{{"AllReduce", 1024}})
			st := kids[0].Stats()
			require.Len(t, st, 1)
			assert.Equal(t, split.want, st[0].Link)
			assert.InDelta(t, st[0].BusBW/split.want, st[0].LinkFraction, 1e-12)
			for _, k := range kids {
				assert.NoError(t, k.Close())
			}
		})
	}
}

// partner is the child of the other parent rank of r's color.
func partner(kids []*Comm, r int, color func(int) int) *Comm {
	for q := range kids {
		if q != r && color(q) == color(r) {
			return kids[q]
		}
	}
	return nil
}

// splitEach splits every rank of comms by color (keyed by rank) and
// returns the children by parent rank.
func splitEach(t *testing.T, ctx context.Context, comms []*Comm, color func(r int) int) []*Comm {
	t.Helper()
	kids := make([]*Comm, len(comms))
	errs := eachComm(comms, func(c *Comm) error {
		k, err := c.Split(ctx, color(c.Rank()), c.Rank(), Options{})
		kids[c.Rank()] = k
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return kids
}

package costmodel_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internode/costmodel"
	"github.com/goccl/goccl/topology"
)

const gib = 1 << 30

// dgx is 8 GPUs of NVLink4 and 8 NICs of 400 Gb/s a node, no latency:
// the bandwidth-bound case whose figures are derived by hand below.
func dgx(nodes int) costmodel.System {
	return costmodel.System{Nodes: nodes, GPUs: 8, NVLinkGBs: 450, NICs: 8, NICGbps: 400}
}

func predict(t *testing.T, sys costmodel.System, c costmodel.Collective, s costmodel.Schedule, size int64) costmodel.Prediction {
	t.Helper()
	p, err := costmodel.Predict(sys, c, s, size)
	require.NoError(t, err)
	return p
}

// The default NVLink rate is topology's: 18 links of an H100's or H200's
// generation (compute capability 9.0).
func TestDefaultNVLinkIsTopologys(t *testing.T) {
	assert.Equal(t, 18*topology.NVLinkGBs(9, 0), costmodel.DefaultNVLinkGBs)
}

// Each case's time is worked out by hand from the schedule (bytes a GPU
// sends on each link over that link's rate), not from the package.
func TestPredictHandDerived(t *testing.T) {
	s := float64(gib)
	nv, nic := 450e9, 50e9 // bytes a second a GPU: NVLink; 8 x 400 Gb/s over 8 GPUs
	for _, tc := range []struct {
		name       string
		sys        costmodel.System
		coll       costmodel.Collective
		sched      costmodel.Schedule
		wantSec    float64 // legs as the schedule runs them
		wantOver   float64 // legs overlapped
		wantNVLink float64 // bytes a GPU sends over NVLink
		wantNIC    float64 // and through the NICs
	}{
		{"one node: ring AllReduce over NVLink", dgx(1), costmodel.AllReduce, costmodel.FlatRing,
			2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s, 0},
		{"one node: hierarchical is the node's RS and AG", dgx(1), costmodel.AllReduce, costmodel.HierRing,
			2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s, 0},
		{"2 nodes x 8: flat ring, NICs the bottleneck", dgx(2), costmodel.AllReduce, costmodel.FlatRing,
			// 16 ranks: each sends 2*15/16 S, an eighth of it through its NIC share
			2 * 15.0 / 16 * s / 8 / nic, 2 * 15.0 / 16 * s / 8 / nic, 2 * 15.0 / 16 * s * 7 / 8, 2 * 15.0 / 16 * s / 8},
		{"2 nodes x 8: RS, rail ring of S/8, AG", dgx(2), costmodel.AllReduce, costmodel.HierRing,
			7.0/8*s/nv + s/8/nic + 7.0/8*s/nv, 2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s, s / 8},
		{"2 nodes x 8: a tree of two is the ring", dgx(2), costmodel.AllReduce, costmodel.HierTree,
			7.0/8*s/nv + s/8/nic + 7.0/8*s/nv, 2 * 7.0 / 8 * s / nv, 2 * 7.0 / 8 * s, s / 8},
		{"4 nodes x 8: direct rail sends the shard to 3 nodes", dgx(4), costmodel.AllReduce, costmodel.HierDirect,
			7.0/8*s/nv + 3*s/8/nic + 7.0/8*s/nv, 3 * s / 8 / nic, 2 * 7.0 / 8 * s, 3 * s / 8},
		{"4 nodes x 8: ReduceScatter, RS then rail RS", dgx(4), costmodel.ReduceScatter, costmodel.HierRing,
			7.0/8*s/nv + 3.0/4*s/8/nic, math.Max(7.0/8*s/nv, 3.0/4*s/8/nic), 7.0 / 8 * s, 3.0 / 4 * s / 8},
		{"4 nodes x 8: AllGather, rail AG then AG", dgx(4), costmodel.AllGather, costmodel.HierRing,
			3.0/4*s/8/nic + 7.0/8*s/nv, math.Max(7.0/8*s/nv, 3.0/4*s/8/nic), 7.0 / 8 * s, 3.0 / 4 * s / 8},
		{"4 nodes x 8: flat AllGather", dgx(4), costmodel.AllGather, costmodel.FlatRing,
			31.0 / 32 * s / 8 / nic, 31.0 / 32 * s / 8 / nic, 31.0 / 32 * s * 7 / 8, 31.0 / 32 * s / 8},
		{"4 nodes x 8: Broadcast on the root's rail, then a chain", dgx(4), costmodel.Broadcast, costmodel.HierRing,
			s/nic + s/nv, s / nic, s, s},
		{"4 nodes x 8: flat Broadcast chain", dgx(4), costmodel.Broadcast, costmodel.FlatRing,
			s / 8 / nic, s / 8 / nic, s * 7 / 8, s / 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := predict(t, tc.sys, tc.coll, tc.sched, gib)
			assert.InEpsilon(t, tc.wantSec, p.Seconds(), 1e-12)
			assert.InEpsilon(t, tc.wantOver, p.OverlappedSeconds(), 1e-12)
			assert.InEpsilon(t, tc.wantNVLink, p.LinkBytes(costmodel.NVLink), 1e-12)
			if tc.wantNIC == 0 {
				assert.Zero(t, p.LinkBytes(costmodel.NIC))
			} else {
				assert.InEpsilon(t, tc.wantNIC, p.LinkBytes(costmodel.NIC), 1e-12)
			}
			assert.InEpsilon(t, s/p.Seconds()/1e9, p.AlgBW(), 1e-12)
		})
	}
}

// A 2-rank job, one GPU on each of two nodes, is a plain 2-rank ring over
// one NIC, whatever the schedule: busbw is the NIC's line rate.
func TestTwoNodesOfOneGPU(t *testing.T) {
	sys := costmodel.System{Nodes: 2, GPUs: 1, NVLinkGBs: 450, NICs: 1, NICGbps: 400}
	for _, c := range costmodel.Collectives {
		for _, sch := range costmodel.Schedules {
			p := predict(t, sys, c, sch, gib)
			assert.Zero(t, p.LinkBytes(costmodel.NVLink), "%v %v", c, sch)
			assert.InEpsilon(t, 50.0, p.BusBW(), 1e-12, "%v %v", c, sch)
			require.Len(t, p.Legs, 1, "%v %v", c, sch)
			assert.Equal(t, costmodel.NIC, p.Legs[0].Link)
		}
	}
}

// One node changes nothing: every schedule is the node's own, with no
// NIC leg, and busbw is NVLink's rate.
func TestOneNodeIsIntraNode(t *testing.T) {
	for _, c := range []costmodel.Collective{costmodel.AllReduce, costmodel.ReduceScatter, costmodel.AllGather} {
		flat := predict(t, dgx(1), c, costmodel.FlatRing, gib)
		for _, sch := range costmodel.Schedules {
			p := predict(t, dgx(1), c, sch, gib)
			assert.InEpsilon(t, flat.Seconds(), p.Seconds(), 1e-12, "%v %v", c, sch)
			assert.InEpsilon(t, 450.0, p.BusBW(), 1e-12, "%v %v", c, sch)
			for _, l := range p.Legs {
				assert.Equal(t, costmodel.NVLink, l.Link, "%v %v %s", c, sch, l.Name)
			}
		}
	}
}

// ReduceScatter and AllGather mirror each other; AllReduce's hierarchical
// legs are a ReduceScatter's plus an AllGather's on the node and twice
// their bytes on the rail ring.
func TestSymmetry(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 64} {
		for _, sch := range []costmodel.Schedule{costmodel.FlatRing, costmodel.HierRing, costmodel.HierDirect} {
			rs := predict(t, dgx(n), costmodel.ReduceScatter, sch, gib)
			ag := predict(t, dgx(n), costmodel.AllGather, sch, gib)
			assert.InEpsilon(t, rs.Seconds(), ag.Seconds(), 1e-12, "n=%d %v", n, sch)
			assert.InEpsilon(t, rs.LinkBytes(costmodel.NVLink), ag.LinkBytes(costmodel.NVLink), 1e-12)
			assert.Equal(t, rs.LinkBytes(costmodel.NIC), ag.LinkBytes(costmodel.NIC))
		}
		ar := predict(t, dgx(n), costmodel.AllReduce, costmodel.HierRing, gib)
		rs := predict(t, dgx(n), costmodel.ReduceScatter, costmodel.HierRing, gib)
		ag := predict(t, dgx(n), costmodel.AllGather, costmodel.HierRing, gib)
		assert.InEpsilon(t, rs.LinkBytes(costmodel.NVLink)+ag.LinkBytes(costmodel.NVLink), ar.LinkBytes(costmodel.NVLink), 1e-12)
		assert.InDelta(t, 2*rs.LinkBytes(costmodel.NIC), ar.LinkBytes(costmodel.NIC), 1e-3)
	}
}

// Bandwidth-bound limits, by hand: a flat ring runs at the slower of the
// NICs (8 x 50 GB/s a node) and NVLink (450 GB/s carrying 7/8 of the
// traffic: 514 GB/s); goccl's legs in sequence tend, as nodes grow, to
// G / ((G-1)/NVLink + 1/NIC) = 8 / (7/450 + 1/50) = 225 GB/s, and
// overlapped to the NICs' 400.
func TestBandwidthLimits(t *testing.T) {
	limitSeq := 8 / (7.0/450 + 1.0/50)
	for _, tc := range []struct {
		name  string
		nodes int
		sched costmodel.Schedule
		want  float64
		over  bool
		tol   float64
	}{
		{"flat ring, 2 nodes", 2, costmodel.FlatRing, 400, false, 1e-12},
		{"flat ring, 64 nodes", 64, costmodel.FlatRing, 400, false, 1e-12},
		{"legs in sequence, many nodes", 4096, costmodel.HierRing, limitSeq, false, 1e-3},
		{"legs overlapped, many nodes", 4096, costmodel.HierRing, 400, true, 1e-3},
		// 2 nodes overlapped: NVLink carries 2·7/8 S while the rail moves
		// S/8: NVLink bound, busbw = (2·15/16) / (2·7/8) × 450 = 482.1.
		{"legs overlapped, 2 nodes", 2, costmodel.HierRing, 15.0 / 16 / (7.0 / 8) * 450, true, 1e-12},
		// A double tree sends the shard twice (each rank has about four
		// tree edges), so the rail runs at half the NIC share: 2S/(8·50).
		{"tree rail in sequence, many nodes", 4096, costmodel.HierTree, 2.0 / (2*7.0/8/450 + 2.0/8/50), false, 1e-3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := predict(t, dgx(tc.nodes), costmodel.AllReduce, tc.sched, 1<<40)
			got := p.BusBW()
			if tc.over {
				got = p.OverlappedBusBW()
			}
			assert.InEpsilon(t, tc.want, got, tc.tol)
		})
	}
	for _, c := range []costmodel.Collective{costmodel.ReduceScatter, costmodel.AllGather, costmodel.Broadcast} {
		p := predict(t, dgx(16), c, costmodel.FlatRing, 1<<40)
		assert.InEpsilon(t, 400.0, p.BusBW(), 1e-12, "%v", c)
	}
}

// The latency term: each hop of a ring or chain at its link's step
// latency, a tree's levels up and down, one step for a direct exchange;
// with one byte, time is latency.
func TestLatencyTerm(t *testing.T) {
	sys := dgx(4) // 32 ranks
	sys.NVLinkStep, sys.NetStep = time.Microsecond, 5*time.Microsecond
	us := 1e-6
	for _, tc := range []struct {
		coll  costmodel.Collective
		sched costmodel.Schedule
		want  float64
	}{
		// 62 hops, 8 of them between nodes
		{costmodel.AllReduce, costmodel.FlatRing, (8*5 + 54) * us},
		{costmodel.AllReduce, costmodel.HierRing, (7 + 2*3*5 + 7) * us},
		// 4 nodes: tree depth 2 (ranks 0..3, root at position 4)
		{costmodel.AllReduce, costmodel.HierTree, (7 + 2*2*5 + 7) * us},
		{costmodel.AllReduce, costmodel.HierDirect, (7 + 5 + 7) * us},
		{costmodel.ReduceScatter, costmodel.FlatRing, (4*5 + 27) * us},
		{costmodel.Broadcast, costmodel.FlatRing, (3*5 + 28) * us},
		{costmodel.AllGather, costmodel.HierRing, (3*5 + 7) * us},
		{costmodel.Broadcast, costmodel.HierDirect, (5 + 7) * us},
	} {
		p := predict(t, sys, tc.coll, tc.sched, 1)
		assert.InDelta(t, tc.want, p.Seconds(), 1e-9, "%v %v", tc.coll, tc.sched)
	}
}

func TestBusFactor(t *testing.T) {
	assert.Equal(t, 1.875, costmodel.AllReduce.BusFactor(16))
	assert.Equal(t, 0.9375, costmodel.ReduceScatter.BusFactor(16))
	assert.Equal(t, 0.9375, costmodel.AllGather.BusFactor(16))
	assert.Equal(t, 1.0, costmodel.Broadcast.BusFactor(16))
}

func TestPredictRejects(t *testing.T) {
	good := dgx(2)
	for _, tc := range []struct {
		name string
		edit func(*costmodel.System)
		size int64
		want string
	}{
		{"no nodes", func(s *costmodel.System) { s.Nodes = 0 }, 1, "nodes 0"},
		{"no GPUs", func(s *costmodel.System) { s.GPUs = 0 }, 1, "GPUs per node 0"},
		{"one rank", func(s *costmodel.System) { s.Nodes, s.GPUs = 1, 1 }, 1, "2 ranks"},
		{"no NVLink", func(s *costmodel.System) { s.NVLinkGBs = 0 }, 1, "NVLink bandwidth 0"},
		{"NaN NVLink", func(s *costmodel.System) { s.NVLinkGBs = math.NaN() }, 1, "NVLink bandwidth NaN"},
		{"no NICs", func(s *costmodel.System) { s.NICs = 0 }, 1, "NICs per node 0"},
		{"no NIC rate", func(s *costmodel.System) { s.NICGbps = -1 }, 1, "NIC rate -1"},
		{"negative latency", func(s *costmodel.System) { s.NetStep = -time.Second }, 1, "step latency"},
		{"empty call", func(*costmodel.System) {}, 0, "size 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := good
			tc.edit(&sys)
			_, err := costmodel.Predict(sys, costmodel.AllReduce, costmodel.FlatRing, tc.size)
			require.Error(t, err)
			assert.True(t, errors.Is(err, costmodel.ErrInvalid), err.Error())
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := costmodel.Predict(good, costmodel.Collective(9), costmodel.FlatRing, 1)
	assert.ErrorIs(t, err, costmodel.ErrInvalid)
	_, err = costmodel.Predict(good, costmodel.AllReduce, costmodel.Schedule(-1), 1)
	assert.ErrorIs(t, err, costmodel.ErrInvalid)
	// One node needs no NIC.
	one := good
	one.Nodes, one.NICs, one.NICGbps = 1, 0, 0
	_, err = costmodel.Predict(one, costmodel.AllReduce, costmodel.HierRing, 1)
	assert.NoError(t, err)
}

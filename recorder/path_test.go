package recorder

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// TestRecordPaths: each call keeps the algorithm and transport its
// backend reported; a call without one shows none.
func TestRecordPaths(t *testing.T) {
	r := testRing(8, false)
	paths := []collectives.Path{
		{Algo: collectives.OneShot, Transport: "shm"},
		{Algo: collectives.TwoShot, Transport: "shm"},
		{},
		{Algo: collectives.CopyEngine, Transport: "vmm"},
		{Algo: collectives.OneShot, Transport: "shm"},
	}
	for i, p := range paths {
		r.EndPath(r.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 4, Type: collectives.Float32, Seq: uint64(i + 1)}), nil, p)
	}
	calls := r.Snapshot().Calls
	require.Len(t, calls, len(paths))
	for i, p := range paths {
		assert.Equal(t, string(p.Algo), calls[i].Algo, "call %d", i+1)
		assert.Equal(t, p.Transport, calls[i].Transport, "call %d", i+1)
	}
	assert.Equal(t, []string{"oneshot", "shm", "twoshot", "ce", "vmm"}, r.names, "each name kept once")
}

// TestStatsLinkCeiling: with the ceiling known, each statistic carries it
// and its bus bandwidth's fraction of it, and the collector exports both;
// unknown, neither.
func TestStatsLinkCeiling(t *testing.T) {
	for _, link := range []float64{0, 450} {
		r := New(Config{Size: 8, Meta: Meta{Comm: "c1", Rank: 0, Size: 2}})
		r.SetLink(link)
		id := r.Begin(&collectives.Args{Coll: collectives.AllReduce, Count: 1 << 20, Type: collectives.Float32, Seq: 1})
		time.Sleep(time.Millisecond)
		r.End(id, nil)
		st := r.Stats()
		require.Len(t, st, 1)
		require.Positive(t, st[0].BusBW)
		assert.Equal(t, link, st[0].Link)
		if link > 0 {
			assert.InDelta(t, st[0].BusBW/link, st[0].LinkFraction, 1e-12)
		} else {
			assert.Zero(t, st[0].LinkFraction)
		}
		assert.Equal(t, link, r.Meta().LinkGBs)

		reg := prometheus.NewRegistry()
		reg.MustRegister(NewCollector(func() []Source { return []Source{r} }))
		fams, err := reg.Gather()
		require.NoError(t, err)
		byName := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		require.NotNil(t, byName["goccl_busbw_gbps"])
		if link == 0 {
			assert.Nil(t, byName["goccl_link_ceiling_gbps"], "no ceiling, no metric")
			assert.Nil(t, byName["goccl_busbw_link_fraction"])
			continue
		}
		require.NotNil(t, byName["goccl_link_ceiling_gbps"])
		assert.Equal(t, link, byName["goccl_link_ceiling_gbps"].GetMetric()[0].GetGauge().GetValue())
		require.NotNil(t, byName["goccl_busbw_link_fraction"])
		got := byName["goccl_busbw_link_fraction"].GetMetric()[0].GetGauge().GetValue()
		assert.InDelta(t, st[0].BusBW/link, got, st[0].BusBW/link*1e-3+1e-9, "the fraction of the call's busbw")
	}
}

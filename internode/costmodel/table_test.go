package costmodel_test

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internode/costmodel"
)

func TestParseArgsDefaults(t *testing.T) {
	cfg, err := costmodel.ParseArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Config{
		Nodes: []int{2, 4, 8, 16, 32, 64}, GPUs: 8, NVLinkGBs: 450, NICs: 8, NICGbps: 400,
		Sizes: []int64{1 << 20, 1 << 30}, Colls: costmodel.Collectives, Schedules: costmodel.Schedules,
		NVLinkStep: time.Microsecond, NetStep: 5 * time.Microsecond,
	}, cfg)

	cfg, err = costmodel.ParseArgs([]string{"--nodes", "1, 3", "--gpus", "4", "--nics", "2", "--nic-gbps", "200",
		"--sizes", "64M", "--colls", "all_gather", "--schedules", "tree,flat", "--lat-net", "2us", "--markdown"})
	require.NoError(t, err)
	assert.Equal(t, []int{1, 3}, cfg.Nodes)
	assert.Equal(t, []int64{64 << 20}, cfg.Sizes)
	assert.Equal(t, []costmodel.Collective{costmodel.AllGather}, cfg.Colls)
	assert.Equal(t, []costmodel.Schedule{costmodel.HierTree, costmodel.FlatRing}, cfg.Schedules)
	assert.Equal(t, 2*time.Microsecond, cfg.NetStep)
	assert.True(t, cfg.Markdown)
	assert.Equal(t, 4, cfg.GPUs)

	_, err = costmodel.ParseArgs([]string{"-h"})
	assert.True(t, errors.Is(err, flag.ErrHelp))
}

func TestParseArgsRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "2,x"}, `--nodes "x"`},
		{[]string{"--nodes", "0"}, `--nodes "0": at least 1`},
		{[]string{"--sizes", "1Q"}, `--sizes "1Q"`},
		{[]string{"--sizes", "0"}, `--sizes "0": at least 1 byte`},
		{[]string{"--colls", "all_reduce,reduce"}, `--colls: costmodel: invalid argument: collective "reduce"`},
		{[]string{"--schedules", "mesh"}, `--schedules: costmodel: invalid argument: schedule "mesh"`},
		{[]string{"--gpus", "0"}, "--nodes 2: costmodel: invalid argument: GPUs per node 0"},
		{[]string{"--nodes", "1", "--gpus", "1"}, "--nodes 1: costmodel: invalid argument: 1 node of 1 GPU"},
		{[]string{"--nic-gbps", "0"}, "NIC rate 0"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, `unexpected arguments ["extra"]`},
	} {
		_, err := costmodel.ParseArgs(tc.args)
		require.Error(t, err, "%q", tc.args)
		assert.True(t, errors.Is(err, costmodel.ErrInvalid), "%q: %v", tc.args, err)
		assert.Contains(t, err.Error(), tc.want, "%q", tc.args)
	}
}

// The table's rows are the predictions: a row is checked against Predict's
// figures for it, in both formats.
func TestWrite(t *testing.T) {
	for _, md := range []bool{false, true} {
		cfg, err := costmodel.ParseArgs([]string{"--nodes", "2,64", "--sizes", "1G", "--colls", "all_reduce,broadcast"})
		require.NoError(t, err)
		cfg.Markdown = md
		var out bytes.Buffer
		require.NoError(t, costmodel.Write(&out, cfg))
		text := out.String()
		assert.True(t, strings.HasPrefix(text, "8 GPUs a node; NVLink 450 GB/s a GPU each way; 8 NICs x 400 Gb/s a node (50 GB/s a GPU); a step costs 1.0 us inside a node, 5.0 us between nodes\n"), text)
		assert.Contains(t, text, "\nall_reduce, 1 GiB (GB/s are 1e9 bytes a second)\n")
		assert.Contains(t, text, "\nbroadcast, 1 GiB (GB/s are 1e9 bytes a second)\n")
		assert.Contains(t, text, "\ntree: broadcast runs the rail as a ring\n")
		assert.NotContains(t, text, "tree: all_reduce")

		sys := costmodel.System{Nodes: 2, GPUs: 8, NVLinkGBs: 450, NICs: 8, NICGbps: 400,
			NVLinkStep: time.Microsecond, NetStep: 5 * time.Microsecond}
		p, err := costmodel.Predict(sys, costmodel.AllReduce, costmodel.HierRing, 1<<30)
		require.NoError(t, err)
		// 2 nodes x 8, 1 GiB: RS 7/8 GiB at 450 GB/s + 7 us, rail S/8 at 50 GB/s + 2 x 5 us, AG as RS.
		assert.InDelta(t, 2*(7.0/8*(1<<30)/450e9+7e-6)+(1<<30)/8/50e9+10e-6, p.Seconds(), 1e-15)
		cells := []string{"2", "16", "hier., rail ring", "1.75 GiB", "128.0 MiB",
			"intra RS 2.09 ms + rail AR (ring) 2.69 ms + intra AG 2.09 ms", "6.88 ms", "156.0", "292.5", "479.4"}
		var line string
		for _, l := range strings.Split(text, "\n") {
			if strings.Contains(l, "intra RS 2.09 ms + rail AR (ring)") && strings.HasPrefix(strings.TrimLeft(l, "| "), "2 ") {
				line = l
			}
		}
		require.NotEmpty(t, line, text)
		var got []string
		if md {
			got = strings.Split(strings.Trim(line, "| "), " | ")
		} else {
			got = splitColumns(line)
		}
		assert.Equal(t, cells, got)
		if md {
			assert.Contains(t, text, "\n| nodes | ranks | schedule | NVLink / GPU | NIC / GPU | legs | time | algbw | busbw | busbw, legs overlapped |\n|---:|---:|---|---:|---:|---|---:|---:|---:|---:|\n")
			// per table: the header, its rule, 4 schedules x 2 node counts
			assert.Equal(t, 2*(2+4*2), strings.Count(text, "\n|"))
		}
	}
}

// splitColumns splits a tabwriter line on runs of two or more spaces.
func splitColumns(line string) []string {
	var out []string
	for _, f := range strings.Split(line, "  ") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

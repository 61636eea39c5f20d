package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check/checktest"
	"github.com/goccl/goccl/internal/membuf"
)

func TestBusFactor(t *testing.T) {
	tests := []struct {
		coll collectives.Collective
		n    int
		want float64
	}{
		{collectives.AllReduce, 2, 1},
		{collectives.AllReduce, 4, 1.5},
		{collectives.AllReduce, 8, 1.75},
		{collectives.AllReduce, 1, 0},
		{collectives.ReduceScatter, 2, 0.5},
		{collectives.ReduceScatter, 8, 0.875},
		{collectives.AllGather, 4, 0.75},
		{collectives.Broadcast, 8, 1},
		{collectives.Reduce, 3, 1},
	}
	for _, tt := range tests {
		assert.InDeltaf(t, tt.want, BusFactor(tt.coll, tt.n), 1e-12, "%v n=%d", tt.coll, tt.n)
	}
	// Anchor row: NCCL all_reduce 2 GiB in 6296.35 us on 2 ranks.
	alg, bus := Bandwidths(collectives.AllReduce, 2147483648, 6296.35e-6, 2)
	assert.InDelta(t, 341.07, alg, 0.005)
	assert.InDelta(t, 341.07, bus, 0.005)
	// reduce_scatter 2 GiB in 3647.67 us: algbw 588.73, busbw 294.36.
	alg, bus = Bandwidths(collectives.ReduceScatter, 2147483648, 3647.67e-6, 2)
	assert.InDelta(t, 588.73, alg, 0.005)
	assert.InDelta(t, 294.36, bus, 0.005)
	alg, bus = Bandwidths(collectives.AllReduce, 8, 0, 2)
	assert.Zero(t, alg+bus)
}

func TestShapeOf(t *testing.T) {
	f32 := collectives.Float32
	tests := []struct {
		coll collectives.Collective
		size int64
		typ  collectives.DataType
		n    int
		want Shape
	}{
		{collectives.AllReduce, 8, f32, 2, Shape{Count: 2, Bytes: 8, SendBytes: 8, RecvBytes: 8}},
		{collectives.AllReduce, 10, f32, 2, Shape{Count: 2, Bytes: 8, SendBytes: 8, RecvBytes: 8}},
		{collectives.Broadcast, 1 << 20, collectives.Int8, 4, Shape{Count: 1 << 20, Bytes: 1 << 20, SendBytes: 1 << 20, RecvBytes: 1 << 20}},
		// nccl-tests anchor: all_gather 32 B float on 2 ranks is count 4.
		{collectives.AllGather, 32, f32, 2, Shape{Count: 4, Bytes: 32, SendBytes: 16, RecvBytes: 32}},
		{collectives.AllGather, 8, f32, 4, Shape{Count: 0, Bytes: 0, SendBytes: 0, RecvBytes: 0}},
		{collectives.ReduceScatter, 2147483648, f32, 2, Shape{Count: 268435456, Bytes: 2147483648, SendBytes: 2147483648, RecvBytes: 1073741824}},
		{collectives.ReduceScatter, 100, collectives.Float64, 3, Shape{Count: 4, Bytes: 96, SendBytes: 96, RecvBytes: 32}},
		// nccl-tests anchor (2x H200, -g 2): reduce_scatter and all_gather
		// print "0 0" at 8 B: the per-rank count is rounded down to 16 B.
		{collectives.ReduceScatter, 8, f32, 2, Shape{}},
		{collectives.AllGather, 8, f32, 2, Shape{}},
		{collectives.AllGather, 48, f32, 2, Shape{Count: 4, Bytes: 32, SendBytes: 16, RecvBytes: 32}},
		{collectives.ReduceScatter, 100, collectives.Int8, 3, Shape{Count: 32, Bytes: 96, SendBytes: 96, RecvBytes: 32}},
		{collectives.ReduceScatter, 24, collectives.Float16, 1, Shape{Count: 8, Bytes: 16, SendBytes: 16, RecvBytes: 16}},
	}
	for _, tt := range tests {
		assert.Equalf(t, tt.want, ShapeOf(tt.coll, tt.size, tt.typ, tt.n), "%v %d", tt.coll, tt.size)
	}
}

func TestSizes(t *testing.T) {
	tests := []struct {
		args []string
		want []int64
	}{
		{[]string{"-b", "8", "-e", "128", "-f", "2"}, []int64{8, 16, 32, 64, 128}},
		{[]string{"-b", "8", "-e", "64M", "-f", "4"}, []int64{8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 2097152, 8388608, 33554432}},
		{[]string{"-b", "0", "-e", "4", "-f", "2"}, []int64{0, 1, 2, 4}},
		{[]string{"-b", "1K", "-e", "4K", "-i", "1K"}, []int64{1024, 2048, 3072, 4096}},
		{[]string{"-b", "1K", "-e", "4000", "-i", "1K"}, []int64{1024, 2048, 3072}},
		{[]string{}, []int64{32 << 20}},
	}
	for _, tt := range tests {
		cfg, err := ParseArgs(append([]string{"all_reduce"}, tt.args...))
		require.NoError(t, err, tt.args)
		assert.Equal(t, tt.want, cfg.Sizes(), tt.args)
	}
}

func TestParseArgs(t *testing.T) {
	cfg, err := ParseArgs([]string{"-b", "8", "all_gather", "-e", "1M", "-f", "2", "-n", "3", "-w", "1", "-c", "0",
		"-d", "all", "-o", "max", "-r", "all", "-z", "1", "-a", "1", "--backend", "host", "--json", "x.json", "--label", "mine"})
	require.NoError(t, err)
	assert.Equal(t, collectives.AllGather, cfg.Coll)
	assert.Equal(t, int64(8), cfg.MinBytes)
	assert.Equal(t, int64(1<<20), cfg.MaxBytes)
	assert.Equal(t, int64(2), cfg.StepFactor)
	assert.Equal(t, 3, cfg.Iters)
	assert.Equal(t, 1, cfg.Warmup)
	assert.Equal(t, 0, cfg.Check)
	assert.Len(t, cfg.Types, 12)
	assert.Equal(t, []collectives.Op{collectives.Max}, cfg.Ops)
	assert.True(t, cfg.RootAll)
	assert.True(t, cfg.Blocking)
	assert.Equal(t, AvgMean, cfg.Average)
	assert.Equal(t, BackendHost, cfg.Backend)
	assert.Equal(t, "x.json", cfg.JSON)
	assert.Equal(t, "mine", cfg.Label)

	cfg, err = ParseArgs([]string{"all_reduce_perf", "--minbytes=1K", "--datatype", "bf16,half", "--op", "all", "-G", "20", "-R", "2"})
	require.NoError(t, err)
	assert.Equal(t, collectives.AllReduce, cfg.Coll)
	assert.Equal(t, int64(1024), cfg.MinBytes)
	assert.Equal(t, []collectives.DataType{collectives.BFloat16, collectives.Float16}, cfg.Types)
	assert.Len(t, cfg.Ops, 5)
	assert.Equal(t, 20, cfg.Graph)
	assert.Equal(t, 2, cfg.Register)
	assert.Equal(t, AvgMean, cfg.Average, "default: the mean over ranks, as nccl-tests")

	_, err = ParseArgs([]string{"all_reduce", "-t", "1"})
	require.NoError(t, err, "-t 1 is what goccl does")

	bad := []struct {
		args []string
		want string
	}{
		{nil, "name a test (all_reduce, "},
		{[]string{"all_to_one"}, `unknown collective: "all_to_one" (want all_reduce, `},
		{[]string{"all_reduce", "broadcast"}, "unexpected argument"},
		{[]string{"all_reduce", "-b", "1G", "-e", "1M"}, "minbytes"},
		{[]string{"all_reduce", "-b", "1x"}, "-b"},
		{[]string{"all_reduce", "-d", "float8"}, "-d"},
		{[]string{"all_reduce", "-o", "xor"}, "-o"},
		{[]string{"all_reduce", "-r", "-1"}, "root"},
		{[]string{"all_reduce", "-n", "0"}, "iters"},
		{[]string{"all_reduce", "-a", "7"}, "average"},
		{[]string{"all_reduce", "-R", "3"}, "register"},
		{[]string{"all_reduce", "--backend", "tpu"}, "backend"},
		{[]string{"all_reduce", "--backend", "host", "-G", "5"}, "-G needs"},
		{[]string{"all_reduce", "--backend", "host", "-R", "1"}, "-R needs"},
		{[]string{"all_reduce", "--peer", "p.json"}, "--peer needs --plot"},
		{[]string{"all_reduce", "--bogus"}, "bogus"},
		{[]string{"all_reduce", "-b", "8", "-e", "16", "-i", "0"}, "stepbytes"},
		{[]string{"all_reduce", "-t", "4"}, "goccl run -np 4"},
		{[]string{"all_reduce", "--nthreads", "2"}, "one rank per process"},
		{[]string{"all_reduce", "-m", "4"}, "-m (nccl-tests' aggregated iterations) is not one of goccl bench's flags"},
		{[]string{"all_reduce", "--run_cycles", "2"}, "-run_cycles (nccl-tests' run cycles) is not one of"},
		{[]string{"all_reduce", "-T", "60"}, "GOCCL_TIMEOUT"},
		{[]string{"all_reduce", "-J", "o.json"}, "--json FILE"},
		{[]string{"all_reduce", "-q"}, "flag provided but not defined: -q"},
	}
	for _, tt := range bad {
		_, err := ParseArgs(tt.args)
		require.ErrorIsf(t, err, ErrUsage, "%v", tt.args)
		assert.Containsf(t, err.Error(), tt.want, "%v", tt.args)
	}
}

func TestFormatRowMatchesNCCLTests(t *testing.T) {
	// Lines copied from nccl-tests 2.19.6's output (shared/anchors).
	tests := []struct {
		row  Row
		want string
	}{
		{Row{Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: Result{16.29, 0, 0, 0}, InPlace: Result{16.29, 0, 0, 0}},
			"           8             2     float     sum      -1    16.29    0.00    0.00       0    16.29    0.00    0.00       0"},
		{Row{Size: 2147483648, Count: 536870912, Type: "float", RedOp: "none", Root: 0,
			OutOfPlace: Result{5878.54, 365.31, 365.31, 0}, InPlace: Result{5797.05, 370.44, 370.44, 0}},
			"  2147483648     536870912     float    none       0  5878.54  365.31  365.31       0  5797.05  370.44  370.44       0"},
		{Row{Size: 134217728, Count: 16777216, Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: Result{295.61, 454.04, 227.02, 0}, InPlace: Result{292.55, 458.78, 229.39, 0}},
			"   134217728      16777216     float     sum      -1   295.61  454.04  227.02       0   292.55  458.78  229.39       0"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, FormatRow(tt.row))
	}
	unchecked := FormatRow(Row{Size: 1, Count: 1, Type: "int8", RedOp: "sum", Root: -1, OutOfPlace: Result{Wrong: -1}, InPlace: Result{Wrong: 3}})
	assert.True(t, strings.HasSuffix(unchecked, "     3"), unchecked)
	assert.Contains(t, unchecked, "   N/A")
	assert.Equal(t, "12345.6", FormatTime(12345.6))
	assert.Equal(t, " 123457", FormatTime(123456.7))
	assert.Equal(t, "   0.50", FormatTime(0.5))
}

func TestHeaderColumnsLineUpWithRows(t *testing.T) {
	cfg, err := ParseArgs([]string{"all_reduce", "-b", "8", "-e", "64M", "-f", "4", "-g", "1"})
	require.NoError(t, err)
	var buf bytes.Buffer
	writeHeader(&buf, &cfg, []DeviceLine{{Rank: 0, Pid: 42, Host: "box", Ordinal: 0, BusID: "0000:18:00.0", Name: "NVIDIA H200", Backend: "gpu"},
		{Rank: 1, Pid: 43, Host: "box", Ordinal: -1, Name: "host", Backend: "host"}})
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	assert.Equal(t, "# nThread 1 nGpus 1 minBytes 8 maxBytes 67108864 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", lines[0])
	assert.Equal(t, "#  Rank  0 Group  0 Pid     42 on        box device  0 [0000:18:00.0] NVIDIA H200", lines[3])
	assert.Equal(t, "#  Rank  1 Group  0 Pid     43 on        box device -1 [host] host", lines[4])
	names, units := lines[len(lines)-2], lines[len(lines)-1]
	row := FormatRow(Row{Size: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1})
	// Every column head ends where its row column ends.
	ends := func(s string) []int {
		var e []int
		for i := 1; i <= len(s); i++ {
			if s[i-1] != ' ' && (i == len(s) || s[i] == ' ') {
				e = append(e, i)
			}
		}
		return e
	}
	assert.Equal(t, ends(row), ends(names)[1:], "the leading # aside; "+"names: %q\nrow:   %q", names, row)
	assert.Contains(t, units, "(elements)")
	var foot bytes.Buffer
	writeFooter(&foot, 0, 12.5)
	assert.Equal(t, "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 12.5 \n#\n", foot.String())
	foot.Reset()
	writeFooter(&foot, 2, 1)
	assert.Contains(t, foot.String(), ": 2 FAILED")
}

// runFake runs the benchmark on n in-process fake ranks over host memory.
func runFake(t *testing.T, n int, args []string, setup func(*checktest.Group)) (string, Summary, error) {
	t.Helper()
	cfg, err := ParseArgs(args)
	require.NoError(t, err)
	g := checktest.NewGroup(n)
	if setup != nil {
		setup(g)
	}
	ranks := make([]Rank, n)
	for r := range ranks {
		ranks[r] = Rank{Comm: g.Rank(r), Space: membuf.NewHost()}
	}
	var out bytes.Buffer
	sum, err := Run(context.Background(), &cfg, ranks, &out)
	return out.String(), sum, err
}

func TestRunOnFakeRanks(t *testing.T) {
	for _, coll := range []string{"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"} {
		t.Run(coll, func(t *testing.T) {
			out, sum, err := runFake(t, 3, []string{coll, "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-d", "float,int8", "-o", "sum,min", "-r", "all", "--backend", "host"}, nil)
			require.NoError(t, err, out)
			sizes := 4 // 8, 64, 512, 4096
			combos := 2 * 2
			if coll == "broadcast" || coll == "all_gather" {
				combos = 2
			}
			if coll == "broadcast" || coll == "reduce" {
				combos *= 3
			}
			require.Len(t, sum.Rows, sizes*combos)
			for _, r := range sum.Rows {
				assert.Zero(t, r.OutOfPlace.Wrong)
				assert.Zero(t, r.InPlace.Wrong)
				assert.Positive(t, r.OutOfPlace.TimeUS)
			}
			assert.Contains(t, out, "# Out of bounds values : 0 OK")
			assert.Contains(t, out, "# Using devices")
			assert.Equal(t, 3, strings.Count(out, "#  Rank "), "one device line per rank")
			assert.Equal(t, 1, strings.Count(out, "# nThread"), "only rank 0 prints")
		})
	}
}

func TestRunReportsWrongResults(t *testing.T) {
	out, sum, err := runFake(t, 2, []string{"all_reduce", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "--backend", "host"},
		func(g *checktest.Group) { g.CorruptRank = 1; g.CorruptCall = 3 }) // call 3: the out-of-place check
	require.ErrorIs(t, err, ErrWrong)
	require.Len(t, sum.Rows, 1)
	assert.Equal(t, int64(1), sum.Rows[0].OutOfPlace.Wrong)
	assert.Equal(t, int64(0), sum.Rows[0].InPlace.Wrong)
	assert.Contains(t, out, "# Out of bounds values : 1 FAILED")
}

func TestRunWithoutCheck(t *testing.T) {
	_, sum, err := runFake(t, 2, []string{"reduce_scatter", "-b", "1K", "-e", "1K", "-c", "0", "--backend", "host"}, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), sum.Rows[0].InPlace.Wrong)
	_, _, err = runFake(t, 2, []string{"broadcast", "-r", "5", "-b", "8", "-e", "8", "--backend", "host"}, nil)
	require.ErrorIs(t, err, ErrUsage)
}

func TestRowBestIsTheFasterPlacement(t *testing.T) {
	oop, ip := Result{TimeUS: 10, BusBW: 1}, Result{TimeUS: 8, BusBW: 2}
	for _, tc := range []struct {
		name string
		row  Row
		want Result
	}{
		{"in place faster", Row{OutOfPlace: oop, InPlace: ip}, ip},
		{"out of place faster", Row{OutOfPlace: ip, InPlace: oop}, ip},
		{"equal: out of place", Row{OutOfPlace: oop, InPlace: Result{TimeUS: 10, BusBW: 3}}, oop},
		{"in place not timed", Row{OutOfPlace: oop}, oop},
		{"out of place not timed", Row{InPlace: ip}, ip},
	} {
		assert.Equal(t, tc.want, tc.row.Best(), tc.name)
	}
}

func TestJSONAndPlot(t *testing.T) {
	dir := t.TempDir()
	cfgArgs := []string{"all_reduce", "-b", "8", "-e", "64K", "-f", "4", "-n", "1", "-w", "0", "--backend", "host", "--label", "goccl"}
	_, sum, err := runFake(t, 2, cfgArgs, nil)
	require.NoError(t, err)
	cfg, err := ParseArgs(cfgArgs)
	require.NoError(t, err)
	rep := NewReport(&cfg, sum)
	path := filepath.Join(dir, "out.json")
	require.NoError(t, rep.WriteJSON(path))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, key := range []string{`"collective": "all_reduce"`, `"backend": "host"`, `"nranks": 2`, `"rows"`, `"out_of_place"`, `"busbw_gbps"`, `"time_us"`, `"wrong": 0`, `"iters": 1`} {
		assert.Contains(t, string(raw), key)
	}
	back, err := ReadReport(path)
	require.NoError(t, err)
	assert.Equal(t, rep.Rows, back.Rows)

	peer := back
	peer.Label = "nccl"
	for i := range peer.Rows {
		peer.Rows[i].OutOfPlace.BusBW *= 2
	}
	png := filepath.Join(dir, "busbw.png")
	require.NoError(t, WritePlot(png, rep, peer))
	img, err := os.ReadFile(png)
	require.NoError(t, err)
	require.Greater(t, len(img), 1000)
	assert.Equal(t, []byte("\x89PNG\r\n\x1a\n"), img[:8])

	_, err = ReadReport(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.json"), []byte(`{"rows":[]}`), 0o644))
	_, err = ReadReport(filepath.Join(dir, "empty.json"))
	require.ErrorContains(t, err, "no rows")
}

// Under --backend auto, -G and -R are checked again once the job's backend
// is known: on the host backend they fail before anything runs.
func TestCheckBackend(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		backend Backend
		want    string // "" for no error
	}{
		{[]string{"all_reduce", "-G", "2"}, BackendHost, "-G needs the gpu backend (this job runs on the host backend)"},
		{[]string{"all_reduce", "-R", "1"}, BackendHost, "-R needs the gpu backend (this job runs on the host backend)"},
		{[]string{"all_reduce", "-R", "2", "-G", "1"}, BackendGPU, ""},
		{[]string{"all_reduce", "-G", "2", "--backend", "gpu"}, BackendGPU, ""},
		{[]string{"all_reduce"}, BackendHost, ""},
	} {
		cfg, err := ParseArgs(tc.args)
		require.NoError(t, err, "%v: auto (or gpu) takes these flags", tc.args)
		err = cfg.CheckBackend(tc.backend)
		if tc.want == "" {
			assert.NoError(t, err, "%v", tc.args)
			continue
		}
		assert.ErrorIs(t, err, ErrUsage, "%v", tc.args)
		assert.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
	_, err := ParseArgs([]string{"all_reduce", "-G", "2", "--backend", "host"})
	assert.ErrorContains(t, err, "-G needs the gpu backend", "an explicit host backend fails at once")
	assert.NotContains(t, err.Error(), "this job runs", "--backend host said so itself")
}

package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/syncbuf"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/nvls/nvlstest"
	"github.com/goccl/goccl/transport/transporttest"
)

// The NVLS tests run only against the fake multicast node of
// nvls_fake_test.go: every rank's driver is an mcDriver, never the real
// one. The gate is set per test with t.Setenv.

var nvlsVars = []string{"GOCCL_NVLS_ENABLE", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}

// setNVLSEnv sets the four gate variables to env's values ("" for absent).
func setNVLSEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, k := range nvlsVars {
		t.Setenv(k, env[k])
	}
}

var gateOpen = map[string]string{"GOCCL_NVLS_ENABLE": "1"}

// Layout of the team buffer as documented in nvls.go, written out here:
// flags at 0, epochs at 512, data from 4 KiB; the fake's granularity
// keeps the requested 32 MiB.
const (
	tEpochsOff = 512
	tDataOff   = 4096
	tGran      = 2 << 20
	tDataBytes = 32<<20 - tDataOff
	tAbortDev  = 0xabc000 // the fake's device address of the abort flag
	recvBase   = uintptr(0x6000_0000)
)

type nvlsRig struct {
	bes  []*Backend
	drvs []*mcDriver
	node *nvlstest.Node
}

// newNVLSRig builds n backends over the fake multicast node; prep may set
// failures before New. New must succeed on every rank.
func newNVLSRig(t *testing.T, n int, cfg Config, prep func(rank int, d *mcDriver)) *nvlsRig {
	t.Helper()
	r := &nvlsRig{bes: make([]*Backend, n), drvs: make([]*mcDriver, n), node: newMCNode(tGran)}
	for i := range n {
		r.drvs[i] = newMCDriver(r.node, i)
		if prep != nil {
			prep(i, r.drvs[i])
		}
	}
	g := transporttest.NewGroup(n)
	err := g.Run(func(rank int, b transport.Bootstrap) error {
		d := r.drvs[rank]
		mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
			return &orderMapper{fakeMapper: &fakeMapper{b: b}, d: d}, nil
		}
		c := cfg
		c.Device = rank
		be, err := newBackend(context.Background(), d, b, c, []byte("fatbin"), mk)
		r.bes[rank] = be
		return err
	})
	require.NoError(t, err, "New fails on no rank because of NVLS")
	for _, d := range r.drvs {
		d.failOn = ""
	}
	t.Cleanup(func() { r.close(t) })
	return r
}

// close closes every backend together (Close is collective).
func (r *nvlsRig) close(t *testing.T) {
	for i, err := range together(len(r.bes), func(i int) error { return r.bes[i].Close() }) {
		require.NoError(t, err, "rank %d: close", i)
	}
}

func (r *nvlsRig) assertNothingLive(t *testing.T) {
	t.Helper()
	h, res, maps, binds := r.node.Live()
	assert.Zero(t, h, "multicast and memory handles")
	assert.Zero(t, res, "address reservations")
	assert.Zero(t, maps, "mappings")
	assert.Zero(t, binds, "multicast bindings")
}

// logBuffer captures the default logger's output for a test.
type logBuffer struct{ syncbuf.Buffer }

// lines returns the lines that contain every one of substr.
func (l *logBuffer) lines(substr ...string) []string {
	var out []string
next:
	for _, line := range strings.Split(l.String(), "\n") {
		for _, s := range substr {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

func captureLog(t *testing.T) *logBuffer {
	buf := &logBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

// nvlsKernels are the (type, op) pairs kernels/nvls.cu exports.
var nvlsKernels = []string{"f32_sum", "f16_sum", "bf16_sum", "i32_sum", "u32_sum", "i64_sum", "u64_sum",
	"i32_min", "u32_min", "i64_min", "u64_min", "i32_max", "u32_max", "i64_max", "u64_max"}

func TestNVLSTeamBuiltAtNew(t *testing.T) {
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			setNVLSEnv(t, gateOpen)
			logs := captureLog(t)
			r := newNVLSRig(t, n, Config{}, nil)
			assert.Len(t, r.node.Created(), 1, "one multicast object for the team")
			for rank, be := range r.bes {
				d := r.drvs[rank]
				on, reason := be.NVLS()
				assert.True(t, on, "rank %d: %s", rank, reason)
				assert.Equal(t, fmt.Sprintf("multicast team of %d ranks, %d-byte buffer", n, 32<<20), reason)
				assert.NotZero(t, d.mcVA)
				assert.NotZero(t, d.ucVA)
				creates := 0
				for _, c := range d.Calls {
					if c == "MulticastCreate" {
						creates++
					}
				}
				assert.Equal(t, map[bool]int{true: 1, false: 0}[rank == 0], creates, "rank %d creates", rank)
				// Flags and epochs (the 4 KiB header) zeroed before first use.
				assert.Contains(t, d.opsOf("memset32"), fakeOp{kind: "memset32", dst: uintptr(d.ucVA), n: tDataOff / 4})
				// Every NVLS kernel looked up, once; none that nvls.cu lacks.
				seen := map[string]int{}
				for _, name := range d.names {
					seen[name]++
				}
				for _, k := range nvlsKernels {
					assert.Equal(t, 1, seen["goccl_nvls_allreduce_"+k], k)
					assert.Equal(t, 1, seen["goccl_nvls_reducescatter_"+k], k)
				}
				nv := 0
				for name := range seen {
					if strings.HasPrefix(name, "goccl_nvls_") {
						nv++
					}
				}
				assert.Equal(t, 2*len(nvlsKernels), nv)
			}
			assert.Len(t, logs.lines("nvls decision", "nvls=true"), n, "INFO decision on every rank")
		})
	}
}

// nvlsParams decodes goccl_nvls::Params at the offsets of kernels/nvls.cu.
type nvlsParams struct {
	mc, src, dst, bytes, stride, mcFlags, ucFlags, epochs, abort uint64
	rank, nranks, root, pad                                      uint32
}

func decodeNVLSParams(t *testing.T, p []byte) nvlsParams {
	require.Len(t, p, 88+32, "goccl_nvls::Params, then the StampTail")
	return nvlsParams{mc: u64at(p, 0), src: u64at(p, 8), dst: u64at(p, 16), bytes: u64at(p, 24), stride: u64at(p, 32),
		mcFlags: u64at(p, 40), ucFlags: u64at(p, 48), epochs: u64at(p, 56), abort: u64at(p, 64),
		rank: u32at(p, 72), nranks: u32at(p, 76), root: u32at(p, 80), pad: u32at(p, 84)}
}

// wantLaunch is one NVLS kernel launch of a call.
type wantLaunch struct {
	grid          uint32
	dst, bytes    uint64
	stride        uint64
	before, after []fakeOp // copies around it
}

func TestNVLSDispatch(t *testing.T) {
	const n, me = 4, 2
	send, recv := rankAddr(sendBase, me), rankAddr(recvBase, me)
	mi := 1 << 20
	ar := func(count int, dt collectives.DataType, op collectives.Op) collectives.Args {
		return collectives.Args{Coll: collectives.AllReduce, Send: send, Recv: recv, Count: count, Type: dt, Op: op, Stream: uintptr(userStream)}
	}
	rs := func(count int, dt collectives.DataType, op collectives.Op) collectives.Args {
		a := ar(count, dt, op)
		a.Coll = collectives.ReduceScatter
		return a
	}
	other := func(c collectives.Collective, count int) collectives.Args {
		a := ar(count, collectives.Float32, collectives.Sum)
		a.Coll = c
		return a
	}
	copyOp := func(dst, src uintptr, bytes uint64) fakeOp {
		return fakeOp{kind: "copy", stream: userStream, dst: dst, src: src, n: bytes}
	}

	setNVLSEnv(t, gateOpen)
	rigs := map[string]*nvlsRig{
		"":        newNVLSRig(t, n, Config{}, nil),
		"nvls":    newNVLSRig(t, n, Config{Algo: "nvls"}, nil),
		"oneshot": newNVLSRig(t, n, Config{Algo: "oneshot"}, nil),
	}
	cases := []struct {
		name   string
		algo   string
		args   collectives.Args
		kernel string
		nvls   []func(uc uintptr) wantLaunch // nil: not NVLS
	}{
		{"allreduce f32 sum 1 MiB", "", ar(mi/4, collectives.Float32, collectives.Sum), "goccl_nvls_allreduce_f32_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				// 256 KiB reduced per rank: 8 blocks of 32 KiB.
				return wantLaunch{grid: 8, bytes: 1 << 20,
					before: []fakeOp{copyOp(uc+tDataOff, send, 1<<20)}, after: []fakeOp{copyOp(recv, uc+tDataOff, 1<<20)}}
			}}},
		{"allreduce i32 sum at the threshold", "", ar(65536, collectives.Int32, collectives.Sum), "goccl_nvls_allreduce_i32_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				return wantLaunch{grid: 2, bytes: 256 << 10,
					before: []fakeOp{copyOp(uc+tDataOff, send, 256<<10)}, after: []fakeOp{copyOp(recv, uc+tDataOff, 256<<10)}}
			}}},
		{"allreduce bf16 sum 2 MiB", "", ar(mi, collectives.BFloat16, collectives.Sum), "goccl_nvls_allreduce_bf16_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				return wantLaunch{grid: 16, bytes: 2 << 20,
					before: []fakeOp{copyOp(uc+tDataOff, send, 2<<20)}, after: []fakeOp{copyOp(recv, uc+tDataOff, 2<<20)}}
			}}},
		{"allreduce u64 min odd size", "", ar(mi/8+1, collectives.Uint64, collectives.Min), "goccl_nvls_allreduce_u64_min",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				// 1 MiB + 8: 262146 bytes per rank, 9 blocks.
				return wantLaunch{grid: 9, bytes: 1<<20 + 8,
					before: []fakeOp{copyOp(uc+tDataOff, send, 1<<20+8)}, after: []fakeOp{copyOp(recv, uc+tDataOff, 1<<20+8)}}
			}}},
		{"allreduce i64 max 64 MiB in three chunks", "", ar(8*mi, collectives.Int64, collectives.Max), "goccl_nvls_allreduce_i64_max",
			[]func(uintptr) wantLaunch{
				func(uc uintptr) wantLaunch {
					return wantLaunch{grid: 64, bytes: tDataBytes,
						before: []fakeOp{copyOp(uc+tDataOff, send, tDataBytes)}, after: []fakeOp{copyOp(recv, uc+tDataOff, tDataBytes)}}
				},
				func(uc uintptr) wantLaunch {
					return wantLaunch{grid: 64, bytes: tDataBytes,
						before: []fakeOp{copyOp(uc+tDataOff, send+tDataBytes, tDataBytes)}, after: []fakeOp{copyOp(recv+tDataBytes, uc+tDataOff, tDataBytes)}}
				},
				func(uc uintptr) wantLaunch {
					// 64 MiB - 2*(32 MiB - 4 KiB) = 8 KiB: 2 KiB per rank.
					return wantLaunch{grid: 1, bytes: 8 << 10,
						before: []fakeOp{copyOp(uc+tDataOff, send+2*tDataBytes, 8<<10)}, after: []fakeOp{copyOp(recv+2*tDataBytes, uc+tDataOff, 8<<10)}}
				},
			}},
		{"reducescatter f16 sum aligned: one copy in", "", rs(131072, collectives.Float16, collectives.Sum), "goccl_nvls_reducescatter_f16_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				return wantLaunch{grid: 8, dst: uint64(recv), bytes: 256 << 10, stride: 256 << 10,
					before: []fakeOp{copyOp(uc+tDataOff, send, 4*256<<10)}}
			}}},
		{"reducescatter i32 max unaligned: a copy per block", "", rs(65537, collectives.Int32, collectives.Max), "goccl_nvls_reducescatter_i32_max",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				const b, stride = 262148, 262160
				var in []fakeOp
				for r := range uintptr(n) {
					in = append(in, copyOp(uc+tDataOff+r*stride, send+r*b, b))
				}
				return wantLaunch{grid: 9, dst: uint64(recv), bytes: b, stride: stride, before: in}
			}}},
		{"forced nvls, tiny allreduce", "nvls", ar(2, collectives.Float32, collectives.Sum), "goccl_nvls_allreduce_f32_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				return wantLaunch{grid: 1, bytes: 8,
					before: []fakeOp{copyOp(uc+tDataOff, send, 8)}, after: []fakeOp{copyOp(recv, uc+tDataOff, 8)}}
			}}},
		{"forced nvls, tiny reducescatter", "nvls", rs(1, collectives.Uint64, collectives.Sum), "goccl_nvls_reducescatter_u64_sum",
			[]func(uintptr) wantLaunch{func(uc uintptr) wantLaunch {
				var in []fakeOp
				for r := range uintptr(n) {
					in = append(in, copyOp(uc+tDataOff+r*16, send+r*8, 8))
				}
				return wantLaunch{grid: 1, dst: uint64(recv), bytes: 8, stride: 16, before: in}
			}}},
		{"below the threshold", "", ar(65535, collectives.Int32, collectives.Sum), "goccl_allreduce_ll_i32_sum", nil},
		{"f64 has no multimem", "", ar(mi, collectives.Float64, collectives.Sum), "goccl_allreduce_twoshot_f64_sum", nil},
		{"prod has no multimem", "", ar(mi, collectives.Float32, collectives.Prod), "goccl_allreduce_twoshot_f32_prod", nil},
		{"avg has no multimem", "", ar(mi, collectives.Int32, collectives.Avg), "goccl_allreduce_twoshot_i32_avg", nil},
		{"float max has no multimem", "", ar(mi, collectives.Float16, collectives.Max), "goccl_allreduce_twoshot_f16_max", nil},
		{"8-bit has no multimem", "", ar(mi, collectives.Int8, collectives.Sum), "goccl_allreduce_twoshot_i8_sum", nil},
		{"reducescatter prod", "", rs(mi, collectives.Float32, collectives.Prod), "goccl_reducescatter_oneshot_f32_prod", nil},
		{"reducescatter small", "", rs(16, collectives.Float32, collectives.Sum), "goccl_reducescatter_oneshot_f32_sum", nil},
		{"reduce", "", other(collectives.Reduce, mi), "goccl_reduce_oneshot_f32_sum", nil},
		{"broadcast", "", other(collectives.Broadcast, mi), "goccl_broadcast_oneshot", nil},
		{"allgather", "", other(collectives.AllGather, mi), "goccl_allgather_oneshot", nil},
		{"forced nvls, f64", "nvls", ar(2, collectives.Float64, collectives.Sum), "goccl_allreduce_ll_f64_sum", nil},
		{"forced oneshot wins over nvls", "oneshot", ar(mi, collectives.Float32, collectives.Sum), "goccl_allreduce_oneshot_f32_sum", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := rigs[tc.algo]
			be, d := r.bes[me], r.drvs[me]
			uc, mc := uintptr(d.ucVA), d.mcVA
			d.ops, d.launches = nil, nil
			a := tc.args
			require.NoError(t, be.Run(context.Background(), &a))
			ops := d.opsOf()
			if tc.nvls == nil {
				require.Len(t, ops, 1, "one launch, no copies")
				assert.Equal(t, tc.kernel, ops[0].name)
				require.Len(t, d.launches, 1)
				assert.Len(t, d.launches[0].params, paramSize, "goccl::Params")
				return
			}
			var want []fakeOp
			for _, f := range tc.nvls {
				w := f(uc)
				want = append(want, w.before...)
				want = append(want, fakeOp{kind: "launch", stream: userStream, name: tc.kernel})
				want = append(want, w.after...)
			}
			// Compare the op sequence without the launch payload, then each
			// launch's parameters.
			var got []fakeOp
			var launches []fakeOp
			for _, o := range ops {
				if o.kind == "launch" {
					launches = append(launches, o)
					o.data, o.n = nil, 0
				}
				got = append(got, o)
			}
			require.Equal(t, want, got)
			require.Len(t, launches, len(tc.nvls))
			for i, f := range tc.nvls {
				w := f(uc)
				l := d.launches[i]
				assert.Equal(t, cuda.Dim3{X: w.grid, Y: 1, Z: 1}, l.cfg.Grid, "launch %d grid", i)
				assert.Equal(t, cuda.Dim3{X: 512, Y: 1, Z: 1}, l.cfg.Block)
				assert.Equal(t, userStream, l.cfg.Stream)
				p := decodeNVLSParams(t, l.params)
				assert.Equal(t, nvlsParams{
					mc: mc + tDataOff, dst: w.dst, bytes: w.bytes, stride: w.stride,
					mcFlags: mc, ucFlags: uint64(uc), epochs: uint64(uc) + tEpochsOff, abort: tAbortDev,
					rank: me, nranks: n,
				}, p, "launch %d params", i)
				// The call's first launch claims its Stamp and stores the
				// start, its last the end (the recorder is off here: no slot).
				flags := uint32(0)
				if i == 0 {
					flags |= nvlsStampClaim | nvlsStampStart
				}
				if i == len(tc.nvls)-1 {
					flags |= nvlsStampEnd
				}
				assert.Equal(t, flags, u32at(l.params, 88+24), "launch %d stamp flags", i)
				assert.Zero(t, u64at(l.params, 88), "launch %d stamp slot", i)
				assert.Equal(t, u64at(be.prm[:], offSignals)+stampCountOff, u64at(l.params, 88+16), "launch %d stamp counter", i)
			}
		})
	}
}

func TestNVLSRunDoesNotAllocate(t *testing.T) {
	setNVLSEnv(t, gateOpen)
	r := newNVLSRig(t, 3, Config{}, nil)
	be, d := r.bes[0], r.drvs[0]
	d.quiet = true
	defer func() { d.quiet = false }()
	for _, a := range []collectives.Args{
		{Coll: collectives.AllReduce, Send: 0x7000_0000, Recv: 0x6000_0000, Count: 1 << 20, Type: collectives.Float32, Op: collectives.Sum},
		{Coll: collectives.ReduceScatter, Send: 0x7000_0000, Recv: 0x6000_0000, Count: 1<<18 + 1, Type: collectives.Int32, Op: collectives.Min},
	} {
		assert.Zero(t, testing.AllocsPerRun(50, func() {
			if err := be.Run(context.Background(), &a); err != nil {
				panic(err)
			}
		}), "%s", a.Coll)
	}
}

// simulateNVLS runs every rank's recorded ops: copies move bytes in mem;
// the k-th NVLS launch of every rank runs as one collective step when all
// ranks reached it, modelling the switch: the multicast address mc+off is
// every rank's unicast ucFlags+(mc-mcFlags)+off, and ld_reduce reduces
// element-wise with the reference arithmetic of ref_test.go.
func simulateNVLS(t *testing.T, mem *simMem, drvs []*mcDriver) {
	t.Helper()
	n := len(drvs)
	queues := make([][]fakeOp, n)
	for r, d := range drvs {
		queues[r] = d.opsOf()
		d.ops = nil
	}
	pos := make([]int, n)
	for {
		done := 0
		for r := range n {
			for pos[r] < len(queues[r]) && queues[r][pos[r]].kind != "launch" {
				o := queues[r][pos[r]]
				require.Equal(t, "copy", o.kind, "rank %d: unexpected op", r)
				b := make([]byte, o.n)
				mem.read(o.src, b)
				mem.write(o.dst, b)
				pos[r]++
			}
			if pos[r] == len(queues[r]) {
				done++
			}
		}
		if done == n {
			return
		}
		require.Zero(t, done, "some ranks finished while others wait in an NVLS barrier")
		ls := make([]fakeOp, n)
		ps := make([]nvlsParams, n)
		for r := range n {
			ls[r] = queues[r][pos[r]]
			ps[r] = decodeNVLSParams(t, ls[r].data)
			pos[r]++
			require.Equal(t, ls[0].name, ls[r].name, "rank %d runs another kernel", r)
			require.Equal(t, ls[0].n, ls[r].n, "rank %d launches another grid (epochs would diverge)", r)
			require.Equal(t, ps[0].bytes, ps[r].bytes)
			require.Equal(t, ps[0].stride, ps[r].stride)
			require.Equal(t, uint32(r), ps[r].rank)
		}
		parts := strings.Split(strings.TrimPrefix(ls[0].name, "goccl_nvls_"), "_")
		require.Len(t, parts, 3, ls[0].name)
		dt, op := typeByName(t, parts[1]), opByName(t, parts[2])
		es := uint64(dt.Size())
		count := int(ps[0].bytes / es)
		data := func(r int) uintptr { return uintptr(ps[r].ucFlags + (ps[r].mc - ps[r].mcFlags)) }
		reduce := func(off uintptr) []byte {
			ins := make([][]byte, n)
			for q := range n {
				ins[q] = make([]byte, ps[0].bytes)
				mem.read(data(q)+off, ins[q])
			}
			out := make([]byte, ps[0].bytes)
			for i := range count {
				if dt.IsFloat() {
					putFloat(dt, out, i, reduceFloat(dt, op, ins, 0, i))
				} else {
					putInt(dt, out, i, reduceInt(dt, op, ins, 0, i))
				}
			}
			return out
		}
		switch parts[0] {
		case "allreduce":
			out := reduce(0)
			for q := range n {
				mem.write(data(q), out)
			}
		case "reducescatter":
			for r := range n {
				mem.write(uintptr(ps[r].dst), reduce(uintptr(uint64(r)*ps[0].stride)))
			}
		default:
			t.Fatalf("unexpected kernel %s", ls[0].name)
		}
	}
}

func typeByName(t *testing.T, s string) collectives.DataType {
	for i, name := range typeNames {
		if name == s {
			return collectives.DataType(i)
		}
	}
	t.Fatalf("type %q", s)
	return 0
}

func opByName(t *testing.T, s string) collectives.Op {
	for i, name := range opNames {
		if name == s {
			return collectives.Op(i)
		}
	}
	t.Fatalf("op %q", s)
	return 0
}

// TestNVLSSimulatedResults checks the data flow (copies in and out,
// chunking through a small data area, ReduceScatter strides, in place)
// against the reference reduction of the inputs.
func TestNVLSSimulatedResults(t *testing.T) {
	const n = 3
	setNVLSEnv(t, gateOpen)
	r := newNVLSRig(t, n, Config{}, nil)
	for _, be := range r.bes {
		// Every rank alike: calls pass through the team buffer in 64 KiB chunks.
		be.nv.dataBytes = 64 << 10
	}
	rng := rand.New(rand.NewPCG(6, 6))
	cases := []struct {
		c       collectives.Collective
		dt      collectives.DataType
		op      collectives.Op
		count   int
		inPlace bool
	}{
		{collectives.AllReduce, collectives.Int32, collectives.Sum, 100003, false},
		{collectives.AllReduce, collectives.Uint32, collectives.Min, 100003, true},
		{collectives.AllReduce, collectives.Float32, collectives.Sum, 70000, false},
		{collectives.AllReduce, collectives.Int64, collectives.Max, 40001, true},
		{collectives.ReduceScatter, collectives.Int32, collectives.Sum, 70001, false},
		{collectives.ReduceScatter, collectives.Uint64, collectives.Max, 33333, true},
		{collectives.ReduceScatter, collectives.BFloat16, collectives.Sum, 131072, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %s %s %d inplace=%v", tc.c, tc.dt, tc.op, tc.count, tc.inPlace), func(t *testing.T) {
			mem := newSimMem()
			a := collectives.Args{Coll: tc.c, Count: tc.count, Type: tc.dt, Op: tc.op, Stream: uintptr(userStream)}
			sendBytes, recvBytes := a.SendBytes(n), a.RecvBytes(n)
			ins := make([][]byte, n)
			recvs := make([]uintptr, n)
			for rank, be := range r.bes {
				ins[rank] = make([]byte, sendBytes)
				fill(rng, tc.dt, tc.op, ins[rank])
				send, recv := rankAddr(sendBase, rank), rankAddr(recvBase, rank)
				if tc.inPlace {
					send = recv
					if tc.c == collectives.ReduceScatter {
						recv = send + uintptr(rank*recvBytes)
					}
				}
				mem.write(send, ins[rank])
				recvs[rank] = recv
				a.Send, a.Recv = send, recv
				require.NoError(t, a.Validate(rank, n))
				r.drvs[rank].ops = nil
				require.NoError(t, be.Run(context.Background(), &a))
				launches := 0
				for _, o := range r.drvs[rank].opsOf("launch") {
					assert.True(t, strings.HasPrefix(o.name, "goccl_nvls_"), o.name)
					launches++
				}
				assert.Greater(t, launches, 1, "chunked")
			}
			simulateNVLS(t, mem, r.drvs)
			for rank := range n {
				got := make([]byte, recvBytes)
				mem.read(recvs[rank], got)
				off := 0
				if tc.c == collectives.ReduceScatter {
					off = rank * tc.count
				}
				require.NoError(t, checkReduced(tc.dt, tc.op, ins, off, got, tc.count), "rank %d", rank)
			}
		})
	}
}

func TestNVLSSetupFailureFallsBackTogether(t *testing.T) {
	const n = 3
	cases := []struct {
		name     string
		rank     int
		failCall string // an mcDriver call
		failOn   string // or a fakeDriver op kind, after one success
		step     string
	}{
		{"granularity on rank 1", 1, "MulticastGetGranularity", "", "MulticastGetGranularity"},
		{"create on rank 0", 0, "MulticastCreate", "", "MulticastCreate"},
		{"export on rank 0", 0, "MemExportToFD", "", "MemExportToFD"},
		{"import on rank 2", 2, "MemImportFromFD", "", "MemImportFromFD"},
		{"add device on rank 1", 1, "MulticastAddDevice", "", "MulticastAddDevice"},
		{"memory on rank 2", 2, "MemCreate", "", "MemCreate"},
		{"bind on rank 2", 2, "MulticastBindMem", "", "MulticastBindMem"},
		{"map on rank 1", 1, "MemMap", "", "MemMap(multicast)"},
		{"access on rank 0", 0, "MemSetAccess", "", "MemSetAccess(multicast)"},
		{"kernel lookup on rank 1", 1, "ModuleGetFunction nvls", "", "kernel lookup"},
		{"clearing the flags on rank 2", 2, "", "memset32", "clear barrier flags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			setNVLSEnv(t, gateOpen)
			logs := captureLog(t)
			fds := nvlstest.CountFDs()
			r := newNVLSRig(t, n, Config{}, func(rank int, d *mcDriver) {
				if rank == tc.rank {
					d.FailCall = tc.failCall
					d.failOn, d.failAfter = tc.failOn, 1
				}
			})
			want := fmt.Sprintf("setup failed on rank %d at %s", tc.rank, tc.step)
			for rank, be := range r.bes {
				on, reason := be.NVLS()
				assert.False(t, on, "rank %d", rank)
				assert.Equal(t, want, reason, "rank %d", rank)
				step := tc.step
				if strings.Contains(step, " ") {
					step = `"` + step + `"` // as slog's text handler quotes it
				}
				warn := logs.lines("level=WARN", fmt.Sprintf(" rank=%d ", rank), fmt.Sprintf("failed_rank=%d ", tc.rank), "step="+step+" ")
				assert.Len(t, warn, 1, "rank %d warns, naming the rank and step", rank)
			}
			assert.Len(t, logs.lines("level=INFO", "nvls decision", "nvls=false"), n)
			r.assertNothingLive(t)
			assert.Equal(t, fds, nvlstest.CountFDs(), "no descriptor leaked")

			// Calls take the ordinary kernels, on every rank alike.
			for rank, be := range r.bes {
				d := r.drvs[rank]
				d.ops, d.launches = nil, nil
				require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce,
					Send: 0x7000_0000, Recv: 0x6000_0000, Count: 1 << 20, Type: collectives.Float32, Op: collectives.Sum}))
				require.Len(t, d.launches, 1)
				assert.Equal(t, "goccl_allreduce_twoshot_f32_sum", d.launches[0].name)
			}
			r.close(t)
			r.assertNothingLive(t)
		})
	}
}

func TestNVLSGateClosedMakesNoMulticastCall(t *testing.T) {
	gpuBox := map[string]string{"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
	withOptIn := func(m map[string]string) map[string]string {
		out := map[string]string{"GOCCL_NVLS_ENABLE": "1"}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name   string
		env    map[string]string
		n      int
		noMC   int // a rank whose device reports no multicast, -1 none
		reason string
	}{
		{"GOCCL_NVLS_ENABLE unset", nil, 4, -1, "rank 0: GOCCL_NVLS_ENABLE is not 1"},
		{"GOCCL_NVLS_ENABLE=0", map[string]string{"GOCCL_NVLS_ENABLE": "0"}, 3, -1, "rank 0: GOCCL_NVLS_ENABLE is not 1"},
		{"GOCCL_NVLS_ENABLE=true", map[string]string{"GOCCL_NVLS_ENABLE": "true"}, 3, -1, "rank 0: GOCCL_NVLS_ENABLE is not 1"},
		{"NCCL_NVLS_ENABLE=0", withOptIn(map[string]string{"NCCL_NVLS_ENABLE": "0"}), 4, -1, "rank 0: NCCL_NVLS_ENABLE=0"},
		{"TORCH_SYMM_MEM_DISABLE_MULTICAST=1", withOptIn(map[string]string{"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}), 4, -1, "rank 0: TORCH_SYMM_MEM_DISABLE_MULTICAST=1"},
		{"NVSHMEM_DISABLE_NVLS=1", withOptIn(map[string]string{"NVSHMEM_DISABLE_NVLS": "1"}), 4, -1, "rank 0: NVSHMEM_DISABLE_NVLS=1"},
		{"the project's GPU machines", gpuBox, 3, -1, "rank 0: GOCCL_NVLS_ENABLE is not 1"},
		{"the project's GPU machines, opted in", withOptIn(gpuBox), 3, -1, "rank 0: NCCL_NVLS_ENABLE=0"},
		{"the project's GPU machines, 2 GPUs", withOptIn(gpuBox), 2, -1, "2 ranks, NVLS needs at least 3"},
		{"gate open, 2 ranks", gateOpen, 2, -1, "2 ranks, NVLS needs at least 3"},
		{"gate open, 1 rank", gateOpen, 1, -1, "1 ranks, NVLS needs at least 3"},
		{"gate open, rank 2 without multicast", gateOpen, 3, 2, "rank 2: multicast not supported by the device or driver"},
	}
	for _, tc := range cases {
		for _, algo := range []string{"", "nvls"} {
			t.Run(fmt.Sprintf("%s algo=%q", tc.name, algo), func(t *testing.T) {
				setNVLSEnv(t, tc.env)
				logs := captureLog(t)
				r := newNVLSRig(t, tc.n, Config{Algo: algo}, func(rank int, d *mcDriver) { d.multicast = rank != tc.noMC })
				for rank, be := range r.bes {
					on, reason := be.NVLS()
					assert.False(t, on)
					assert.Equal(t, tc.reason, reason, "rank %d", rank)
					d := r.drvs[rank]
					d.launches = nil
					require.NoError(t, be.Run(context.Background(), &collectives.Args{Coll: collectives.AllReduce,
						Send: 0x7000_0000, Recv: 0x6000_0000, Count: 1 << 20, Type: collectives.Float32, Op: collectives.Sum}))
					require.Len(t, d.launches, 1)
					assert.False(t, strings.HasPrefix(d.launches[0].name, "goccl_nvls_"), d.launches[0].name)
				}
				assert.Len(t, logs.lines("level=INFO", "nvls decision", "nvls=false"), tc.n)
				if algo == "nvls" {
					assert.Len(t, logs.lines("level=WARN", "GOCCL_ALGO=nvls"), tc.n, "one warning per rank")
				}
				r.close(t)
				assert.Zero(t, r.node.MulticastCalls(), "Multicast* calls")
				for rank, d := range r.drvs {
					assert.Equal(t, []string{"mapper.Free"}, d.Calls, "rank %d: no VMM or multicast call at all", rank)
				}
			})
		}
	}
}

func TestNVLSCloseTearsDownTeamFirst(t *testing.T) {
	setNVLSEnv(t, gateOpen)
	r := newNVLSRig(t, 4, Config{}, nil)
	for _, d := range r.drvs {
		d.Calls = nil
	}
	r.close(t)
	r.assertNothingLive(t)
	for rank, d := range r.drvs {
		last := func(name string) int {
			i := len(d.Calls) - 1
			for i >= 0 && d.Calls[i] != name {
				i--
			}
			return i
		}
		free := last("mapper.Free")
		require.GreaterOrEqual(t, free, 0, "rank %d freed its workspace", rank)
		assert.Equal(t, 1, strings.Count(strings.Join(d.Calls, ","), "MulticastUnbind"), "rank %d", rank)
		assert.Less(t, last("MulticastUnbind"), free, "rank %d: team before workspace", rank)
		assert.Less(t, last("MemRelease"), free, "rank %d: team before workspace", rank)
	}
	// A second Close is a no-op.
	r.close(t)
}

// With the recorder on, an NVLS call's launches carry its Stamp and
// number: the first claims it and stores the start, the last the end.
func TestNVLSStamps(t *testing.T) {
	const slots = 16
	setNVLSEnv(t, gateOpen)
	r := newNVLSRig(t, 4, Config{Stamps: slots}, nil)
	be, d := r.bes[2], r.drvs[2]
	for _, c := range []struct {
		count int // int64 elements
		flags []uint32
	}{{1 << 17, []uint32{7}}, {8 << 20, []uint32{3, 0, 4}}} {
		d.launches = nil
		a := collectives.Args{Coll: collectives.AllReduce, Send: rankAddr(sendBase, 2), Recv: rankAddr(recvBase, 2), Count: c.count,
			Type: collectives.Int64, Op: collectives.Max, Stream: uintptr(userStream), Seq: 21}
		require.NoError(t, be.Run(context.Background(), &a))
		var flags []uint32
		for i, l := range d.launches {
			require.Equal(t, "goccl_nvls_allreduce_i64_max", l.name)
			assert.Equal(t, uint64(be.stamps.dev)+21%slots*stampBytes, u64at(l.params, nvlsTailSlot), "launch %d", i)
			assert.Equal(t, uint64(21), u64at(l.params, nvlsTailSeq), "launch %d", i)
			flags = append(flags, u32at(l.params, nvlsTailFlags))
		}
		assert.Equal(t, c.flags, flags, "%d elements", c.count)
	}
}

package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/check"
	"github.com/goccl/goccl/internal/membuf"
)

// Summary is what a run measured, as rank 0 printed it.
type Summary struct {
	Rows        []Row
	OutOfBounds int     // checks (row placements) with wrong elements
	AvgBusBW    float64 // mean busbw over every placement of every row
	Devices     []DeviceLine
}

// ErrWrong is returned (wrapped) when a check found wrong elements.
var ErrWrong = errors.New("bench: wrong results")

// Run benchmarks cfg on this process's ranks, one goroutine each. The
// process holding rank 0 writes the report to out (other processes write
// nothing). It returns an error wrapping ErrWrong when any check failed.
func Run(ctx context.Context, cfg *Config, ranks []Rank, out io.Writer) (Summary, error) {
	if len(ranks) == 0 {
		return Summary{}, fmt.Errorf("%w: no ranks to run", ErrUsage)
	}
	nranks := ranks[0].Comm.Size()
	if !cfg.RootAll {
		for _, r := range cfg.Roots {
			if cfg.rooted() && r >= nranks {
				return Summary{}, fmt.Errorf("%w: -r: root %d not in [0,%d)", ErrUsage, r, nranks)
			}
		}
	}
	sums := make([]Summary, len(ranks))
	errs := make([]error, len(ranks))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := io.Discard
			if ranks[i].Comm.Rank() == 0 {
				w = out
			}
			r := &runner{cfg: cfg, rk: ranks[i], out: w, n: nranks, me: ranks[i].Comm.Rank()}
			sums[i], errs[i] = r.run(ctx)
			if errs[i] != nil && !errors.Is(errs[i], ErrWrong) {
				cancel() // a failed rank must not leave its siblings waiting
			}
		}()
	}
	wg.Wait()
	var sum Summary
	for i, rk := range ranks {
		if rk.Comm.Rank() == 0 || i == 0 {
			sum = sums[i]
		}
	}
	return sum, errors.Join(errs...)
}

type runner struct {
	cfg   *Config
	rk    Rank
	out   io.Writer
	n, me int

	send, recv membuf.Buffer
	bufs       Buffers
	input      []byte // host staging of inputs
	output     []byte // host copy of outputs
	timer      membuf.Timer
	results    Summary
}

func (r *runner) run(ctx context.Context) (sum Summary, err error) {
	cfg := r.cfg
	devs, err := r.gatherDevices(ctx)
	if err != nil {
		return sum, err
	}
	r.results.Devices = devs
	if err := r.allocate(ctx); err != nil {
		return sum, err
	}
	defer func() {
		if e := r.free(ctx); err == nil {
			err = e
		}
	}()
	if r.timer, err = r.rk.Space.NewTimer(); err != nil {
		return sum, err
	}
	defer r.timer.Close()
	writeHeader(r.out, cfg, devs)

	var busSum float64
	var busN int
	for _, t := range cfg.Types {
		ops := cfg.Ops
		if !cfg.reduces() {
			ops = []collectives.Op{collectives.Sum} // ignored; printed "none"
		}
		for _, op := range ops {
			for _, root := range r.roots() {
				if err := r.warmup(ctx, t, op, root); err != nil {
					return sum, err
				}
				for _, size := range cfg.Sizes() {
					row, err := r.row(ctx, size, t, op, root)
					if err != nil {
						return sum, err
					}
					fmt.Fprintln(r.out, FormatRow(row))
					r.results.Rows = append(r.results.Rows, row)
					for _, p := range []Result{row.OutOfPlace, row.InPlace} {
						busSum += p.BusBW
						busN++
						if p.Wrong > 0 {
							r.results.OutOfBounds++
						}
					}
				}
			}
		}
	}
	if busN > 0 {
		r.results.AvgBusBW = busSum / float64(busN)
	}
	writeFooter(r.out, r.results.OutOfBounds, r.results.AvgBusBW)
	if r.results.OutOfBounds > 0 {
		return r.results, fmt.Errorf("%w: %d checks failed", ErrWrong, r.results.OutOfBounds)
	}
	return r.results, nil
}

func (r *runner) roots() []int {
	if !r.cfg.rooted() {
		return []int{-1}
	}
	if r.cfg.RootAll {
		all := make([]int, r.n)
		for i := range all {
			all[i] = i
		}
		return all
	}
	return r.cfg.Roots
}

func (r *runner) gatherDevices(ctx context.Context) ([]DeviceLine, error) {
	host, _ := os.Hostname()
	d := r.rk.Space.Describe()
	backend := "gpu"
	if d.Ordinal < 0 {
		backend = "host"
	}
	me := DeviceLine{Rank: r.me, Pid: os.Getpid(), Host: host, Ordinal: d.Ordinal, BusID: d.BusID, Name: d.Name, Backend: backend}
	b, _ := json.Marshal(me)
	all, err := r.rk.Comm.Bootstrap().AllGather(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("bench: gather device lines: %w", err)
	}
	out := make([]DeviceLine, len(all))
	for i, raw := range all {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, fmt.Errorf("bench: rank %d's device line: %w", i, err)
		}
	}
	return out, nil
}

// allocate makes send and receive buffers for the largest shape of any
// swept type, the receive one large enough for in-place use too.
func (r *runner) allocate(ctx context.Context) error {
	var sendMax, recvMax int64
	sizes := r.cfg.Sizes()
	for _, t := range r.cfg.Types {
		for _, s := range sizes {
			sh := r.shape(s, t)
			sendMax = max(sendMax, sh.SendBytes)
			recvMax = max(recvMax, sh.SendBytes, sh.RecvBytes)
		}
	}
	var ok bool
	if r.bufs, ok = NewBuffers(r.rk.Space, r.rk.Comm, r.cfg.Register); !ok {
		return fmt.Errorf("%w: -R: this communicator cannot register buffers", ErrUsage)
	}
	var err error
	if r.send, err = r.bufs.Alloc(ctx, int(sendMax)); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r.recv, err = r.bufs.Alloc(ctx, int(recvMax)); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r.cfg.Check > 0 {
		r.input = make([]byte, sendMax)
		r.output = make([]byte, recvMax)
	}
	return nil
}

func (r *runner) free(ctx context.Context) error { return r.bufs.Free(ctx) }

// args builds the call for a shape and placement, following nccl-tests'
// in-place layout: everything in the receive buffer, AllGather's input in
// this rank's slot, ReduceScatter's output in this rank's slot.
func (r *runner) args(sh Shape, t collectives.DataType, op collectives.Op, root int, inPlace bool) collectives.Args {
	a := collectives.Args{Coll: r.cfg.Coll, Send: r.send.Ptr, Recv: r.recv.Ptr, Count: sh.Count, Type: t, Op: op, Root: max(root, 0), Stream: r.rk.Space.Stream()}
	if r.cfg.reduces() && op == collectives.PreMulSum {
		// nccl-tests' mulsum: a scalar per rank (the timed calls; check
		// passes the one its reference uses).
		a.Scalar, _ = collectives.ScalarOf(t, float64(1+r.me%3)) // (t is valid)
	}
	if inPlace {
		a.Send = r.recv.Ptr
		switch r.cfg.Coll {
		case collectives.AllGather:
			a.Send = r.recv.At(r.me * int(sh.SendBytes))
		case collectives.ReduceScatter:
			a.Recv = r.recv.At(r.me * int(sh.RecvBytes))
		}
	}
	return a
}

func (r *runner) warmup(ctx context.Context, t collectives.DataType, op collectives.Op, root int) error {
	sizes := r.cfg.Sizes()
	for _, s := range []int64{sizes[len(sizes)-1], sizes[0]} {
		do, _, err := r.ops(ctx, r.shape(s, t), t, op, root, false)
		if err != nil {
			return err
		}
		for i := 0; i < r.cfg.Warmup; i++ {
			if err := do(); err != nil {
				return fmt.Errorf("bench: warm-up %v: %w", r.cfg.TestName(), err)
			}
		}
		if err := r.rk.Space.Sync(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) row(ctx context.Context, size int64, t collectives.DataType, op collectives.Op, root int) (Row, error) {
	sh := r.shape(size, t)
	row := Row{Size: sh.Bytes, Count: sh.Count, Type: t.String(), RedOp: op.String(), Root: root}
	if !r.cfg.reduces() {
		row.RedOp = "none"
	}
	for _, inPlace := range []bool{false, true} {
		res, err := r.measure(ctx, sh, t, op, root, inPlace)
		if err != nil {
			return row, err
		}
		if inPlace {
			row.InPlace = res
		} else {
			row.OutOfPlace = res
		}
	}
	return row, nil
}

func (r *runner) measure(ctx context.Context, sh Shape, t collectives.DataType, op collectives.Op, root int, inPlace bool) (Result, error) {
	do, chk, err := r.ops(ctx, sh, t, op, root, inPlace)
	if err != nil {
		return Result{}, err
	}
	boot := r.rk.Comm.Bootstrap()
	// One untimed call, as nccl-tests makes, then start together.
	if err := r.call(ctx, do); err != nil {
		return Result{}, err
	}
	if err := r.rk.Space.Sync(ctx); err != nil {
		return Result{}, err
	}
	if err := boot.Barrier(ctx); err != nil {
		return Result{}, fmt.Errorf("bench: barrier: %w", err)
	}
	elapsed, ops, err := r.timed(ctx, do)
	if err != nil {
		return Result{}, err
	}
	wrong := int64(-1)
	if r.cfg.Check > 0 && chk != nil {
		wrong = 0
		for rep := 0; rep < r.cfg.Check && wrong == 0; rep++ {
			w, err := chk(rep)
			if err != nil {
				return Result{}, err
			}
			wrong = w
		}
	}
	// Every rank's time and wrong count to every rank.
	var msg [16]byte
	binary.LittleEndian.PutUint64(msg[:], math.Float64bits(elapsed.Seconds()/float64(ops)))
	binary.LittleEndian.PutUint64(msg[8:], uint64(wrong))
	all, err := boot.AllGather(ctx, msg[:])
	if err != nil {
		return Result{}, fmt.Errorf("bench: gather times: %w", err)
	}
	secs := make([]float64, len(all))
	var totalWrong int64
	for i, m := range all {
		if len(m) != 16 {
			return Result{}, fmt.Errorf("bench: rank %d sent a %d-byte timing", i, len(m))
		}
		secs[i] = math.Float64frombits(binary.LittleEndian.Uint64(m))
		if w := int64(binary.LittleEndian.Uint64(m[8:])); w > 0 {
			totalWrong += w
		}
	}
	if r.cfg.Check == 0 || chk == nil {
		totalWrong = -1
	}
	sec := combine(secs, r.cfg.Average)
	algbw, busbw := Bandwidths(r.cfg.Coll, sh.Bytes, sec, r.n)
	if r.n == 1 && inPlace {
		// One rank in place moves no byte: a rate would only measure the
		// call's overhead (hundreds of TB/s of nothing).
		algbw, busbw = 0, 0
	}
	if r.cfg.P2P != NoP2P {
		busbw = algbw * P2PBusFactor(r.cfg.P2P, r.n)
	}
	return Result{TimeUS: sec * 1e6, AlgBW: algbw, BusBW: busbw, Wrong: totalWrong}, nil
}

func combine(secs []float64, avg Average) float64 {
	out := secs[0]
	for _, s := range secs[1:] {
		switch avg {
		case AvgMean:
			out += s
		case AvgMin:
			out = min(out, s)
		case AvgMax:
			out = max(out, s)
		}
	}
	if avg == AvgMean {
		out /= float64(len(secs))
	}
	return out
}

// shape is a swept size's shape for the benchmark's call.
func (r *runner) shape(size int64, t collectives.DataType) Shape {
	if r.cfg.P2P != NoP2P {
		return P2PShapeOf(r.cfg.P2P, size, t, r.n)
	}
	return ShapeOf(r.cfg.Coll, size, t, r.n)
}

// ops returns one placement's call and its check (nil when the placement
// is timed only).
func (r *runner) ops(ctx context.Context, sh Shape, t collectives.DataType, op collectives.Op, root int, inPlace bool) (func() error, func(rep int) (int64, error), error) {
	if r.cfg.P2P != NoP2P {
		return r.p2pOps(ctx, sh, t, max(root, 0), inPlace)
	}
	a := r.args(sh, t, op, root, inPlace)
	do := func() error {
		if err := r.rk.Comm.Run(ctx, &a); err != nil {
			return fmt.Errorf("%v %v count %d: %w", a.Coll, a.Type, a.Count, err)
		}
		return nil
	}
	chk := func(rep int) (int64, error) { return r.check(ctx, &a, sh, root, inPlace, rep) }
	return do, chk, nil
}

func (r *runner) call(ctx context.Context, do func() error) error {
	if err := do(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if r.cfg.Blocking {
		if err := r.rk.Space.Sync(ctx); err != nil {
			return err
		}
		if err := r.rk.Comm.Bootstrap().Barrier(ctx); err != nil {
			return fmt.Errorf("bench: barrier: %w", err)
		}
	}
	return nil
}

// timed runs the measured iterations and returns their elapsed time and
// how many operations it covers.
func (r *runner) timed(ctx context.Context, do func() error) (time.Duration, int, error) {
	n := r.cfg.Iters
	if r.cfg.Graph == 0 {
		if err := r.timer.Start(); err != nil {
			return 0, 0, err
		}
		for i := 0; i < n; i++ {
			if err := r.call(ctx, do); err != nil {
				return 0, 0, err
			}
		}
		el, err := r.timer.Stop()
		return el, n, err
	}
	g, ok := r.rk.Space.(membuf.Grapher)
	if !ok {
		return 0, 0, fmt.Errorf("bench: -G: %w", membuf.ErrNoGraphs)
	}
	if err := g.BeginCapture(); err != nil {
		return 0, 0, err
	}
	for i := 0; i < n; i++ {
		if err := do(); err != nil {
			_, _ = g.EndCapture()
			return 0, 0, fmt.Errorf("bench: capture: %w", err)
		}
	}
	graph, err := g.EndCapture()
	if err != nil {
		return 0, 0, err
	}
	defer graph.Close()
	if err := r.rk.Comm.Bootstrap().Barrier(ctx); err != nil {
		return 0, 0, err
	}
	if err := r.timer.Start(); err != nil {
		return 0, 0, err
	}
	for l := 0; l < r.cfg.Graph; l++ {
		if err := graph.Launch(); err != nil {
			return 0, 0, fmt.Errorf("bench: graph launch: %w", err)
		}
	}
	el, err := r.timer.Stop()
	return el, n * r.cfg.Graph, err
}

// check runs the call once on fresh inputs with a poisoned output and
// returns this rank's wrong element count.
func (r *runner) check(ctx context.Context, a *collectives.Args, sh Shape, root int, inPlace bool, rep int) (int64, error) {
	c := check.Case{Coll: a.Coll, Type: a.Type, Op: a.Op, Root: a.Root, NRanks: r.n, Count: a.Count,
		Seed: check.Seed(r.cfg.Seed, uint64(sh.Bytes), uint64(a.Type), uint64(a.Op), uint64(root+1), boolU(inPlace), uint64(rep))}
	sp := r.rk.Space
	ts := a.Type.Size()
	poison := check.PoisonByte(rep)
	recvSpan := int(max(sh.SendBytes, sh.RecvBytes))
	if !inPlace {
		recvSpan = int(sh.RecvBytes)
	}
	if err := sp.Fill(r.recv, 0, recvSpan, poison); err != nil {
		return 0, err
	}
	if c.HasInput(r.me) {
		in := r.input[:c.InputCount()*ts]
		if err := check.FillInput(c, r.me, in); err != nil {
			return 0, err
		}
		dst, off := r.send, 0
		if inPlace {
			dst, off = r.recv, int(a.Send-r.recv.Ptr)
		}
		if err := sp.CopyIn(dst, off, in); err != nil {
			return 0, err
		}
	}
	// PreMulSum: this rank's scalar, as the reference has it.
	if a.Coll.Reduces() && a.Op == collectives.PreMulSum {
		ca := *a
		var err error
		if ca.Scalar, err = check.PremulScalarOf(c, r.me); err != nil {
			return 0, err
		}
		a = &ca
	}
	// Broadcast's non-root in-place input is its (poisoned) output.
	if err := r.rk.Comm.Run(ctx, a); err != nil {
		return 0, fmt.Errorf("bench: check %v: %w", a.Coll, err)
	}
	if err := sp.Sync(ctx); err != nil {
		return 0, err
	}
	outN := c.OutputCount(r.me) * ts
	if outN == 0 {
		return 0, nil
	}
	got := r.output[:outN]
	if err := sp.CopyOut(got, r.recv, int(a.Recv-r.recv.Ptr)); err != nil {
		return 0, err
	}
	res, err := check.Verify(c, r.me, got)
	if err != nil {
		return 0, err
	}
	return int64(res.Wrong), nil
}

func boolU(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

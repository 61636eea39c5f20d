// Command p2pgpu checks point-to-point calls on the GPU backend as N ranks
// started by `goccl run -np N p2pgpu` (scripts/gpu/p2p.sh runs it; the
// ranks may share one GPU). Every received byte is compared with what the
// sender's seed says it sent, and receive buffers start poisoned with a
// guard after them:
//
//   - sendrecv: a ring (Send to r+1, Recv from r-1 in one group) of every
//     dtype at counts 0, 1, 7, 4095 and 1Mi+3, buffers on and off 16-byte
//     boundaries;
//   - order: all pairs with the Recvs first and the peers in reverse, a
//     Send to itself, and 11 Sends to the next rank (more than a launch
//     takes of one lane);
//   - alltoall, alltoallv (random counts with zeros), gather, scatter at
//     roots 0 and N-1;
//   - graph: a ring captured once in a CUDA graph, replayed 20 times with
//     new inputs;
//   - mismatch (-mode mismatch, last, as it ends the communicator): rank 0
//     sends 100 elements to rank 1, which expects 101: both ranks must get
//     an error wrapping ErrInvalidCount, within the time bound (rank 0,
//     whose Send is eager, from a Recv from rank 1 that it makes next);
//   - eager (-mode eager, in a job of its own, as a rank whose Sends
//     were not eager would hang there): outside any group every rank
//     Sends to r+1 and then Recvs from r-1, each call on its own, at
//     sizes up to -eager-max bytes, then several such Sends queued before
//     their Recvs; the Sends must complete without their receivers;
//   - count0 (-mode count0, in a job of its own): four AllReduces of
//     -count float32, of which rank 1 makes the second with count 0: it
//     takes its number but launches nothing, so rank 1's third call meets
//     the others' second. Every rank must fail, within the time bound,
//     with an error wrapping ErrCallMismatch that names both numbers (or,
//     when a peer's failure reached it first, that peer's error, whose
//     text names them).
//
// It prints "p2pgpu: rank R: <case>: PASS|FAIL ..." lines and
// "p2pgpu: rank R: N cases, F failed", and exits 1 on any failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/membuf"
)

var dtypes = []comm.DataType{comm.Int8, comm.Uint8, comm.Int32, comm.Uint32, comm.Int64, comm.Uint64,
	comm.Float16, comm.Float32, comm.Float64, comm.BFloat16}

const (
	poison = 0xc3
	guard  = 64
)

type rig struct {
	c     *comm.Comm
	sp    *membuf.DeviceSpace
	me, n int
	cases int
	fails int
}

// gen is the byte i of what rank src sends to dst in transfer k of case seed.
func gen(seed uint64, src, dst, k int, b []byte) {
	rng := rand.New(rand.NewPCG(seed^uint64(k)<<40, uint64(src)<<8|uint64(dst)))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

func (r *rig) report(name string, err error) {
	r.cases++
	if err != nil {
		r.fails++
		fmt.Printf("p2pgpu: rank %d: %s: FAIL: %v\n", r.me, name, err)
		return
	}
	fmt.Printf("p2pgpu: rank %d: %s: PASS\n", r.me, name)
}

// xfer is one Send or Recv of this rank, with its buffer.
type xfer struct {
	send    bool
	peer, k int // k: this transfer's number between the pair
	count   int
	dt      comm.DataType
	buf     membuf.Buffer
	off     int // bytes from the buffer's start (misalignment)
}

// eager runs rings of Sends before Recvs outside any group: each rank
// Sends to the next, then Recvs from the previous, every call on its own.
func (r *rig) eager(ctx context.Context, max int) {
	// A Send that waits for its receiver never ends here: fail instead.
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	n, me := r.n, r.me
	next, prev := (me+1)%n, (me+n-1)%n
	seed := uint64(1000)
	for _, bytes := range []int{0, 4, 4096, 4100, max / 2, max} {
		seed++
		xs := []xfer{{send: true, peer: next, count: bytes / 4, dt: comm.Float32},
			{peer: prev, count: bytes / 4, dt: comm.Float32, off: 4 * (bytes % 8 / 4)}}
		r.report(fmt.Sprintf("eager ring %d B", bytes/4*4), r.runEach(ctx, seed, xs))
	}
	// Four Sends of a quarter of the limit queued before their Recvs.
	seed++
	var xs []xfer
	for k := range 4 {
		xs = append(xs, xfer{send: true, peer: next, k: k, count: max / 16, dt: comm.Uint32})
	}
	for k := range 4 {
		xs = append(xs, xfer{peer: prev, k: k, count: max / 16, dt: comm.Uint32, off: 4 * k})
	}
	r.report("eager ring, 4 Sends queued", r.runEach(ctx, seed, xs))
}

// runEach issues xs one call at a time outside any group (in the given
// order) on one stream, waits, and checks every receive buffer.
func (r *rig) runEach(ctx context.Context, seed uint64, xs []xfer) error {
	return r.issue(ctx, seed, xs, false)
}

// run issues xs as one group (in the given order), waits, and checks every
// receive buffer and its guard.
func (r *rig) run(ctx context.Context, seed uint64, xs []xfer) error {
	return r.issue(ctx, seed, xs, true)
}

// issue fills every buffer first (so that no copy or fill stands between
// the calls on the device), then makes the calls, in a group or each on
// its own.
func (r *rig) issue(ctx context.Context, seed uint64, xs []xfer, grouped bool) error {
	for i := range xs {
		x := &xs[i]
		bytes := x.count * x.dt.Size()
		var err error
		if x.buf, err = r.sp.Alloc(x.off + bytes + guard); err != nil {
			return err
		}
		defer func() { _ = r.sp.Free(x.buf) }()
		if x.send {
			b := make([]byte, bytes)
			gen(seed, r.me, x.peer, x.k, b)
			err = r.sp.CopyIn(x.buf, x.off, b)
		} else {
			err = r.sp.Fill(x.buf, 0, x.off+bytes+guard, poison)
		}
		if err != nil {
			return err
		}
	}
	if err := r.sp.Sync(ctx); err != nil {
		return err
	}
	g := comm.NewGroup()
	for _, x := range xs {
		p := x.buf.Ptr + uintptr(x.off)
		var err error
		switch {
		case x.send && grouped:
			err = g.Send(r.c, p, x.count, x.dt, x.peer, r.sp.Stream())
		case x.send:
			err = r.c.Send(ctx, p, x.count, x.dt, x.peer, r.sp.Stream())
		case grouped:
			err = g.Recv(r.c, p, x.count, x.dt, x.peer, r.sp.Stream())
		default:
			err = r.c.Recv(ctx, p, x.count, x.dt, x.peer, r.sp.Stream())
		}
		if err != nil {
			return err
		}
	}
	if grouped {
		if err := g.Run(ctx); err != nil {
			return err
		}
	}
	if err := r.sp.Sync(ctx); err != nil {
		return err
	}
	if err := r.c.Err(); err != nil {
		return err
	}
	return r.check(seed, xs)
}

func (r *rig) check(seed uint64, xs []xfer) error {
	for _, x := range xs {
		if x.send {
			continue
		}
		bytes := x.count * x.dt.Size()
		got := make([]byte, x.off+bytes+guard)
		if err := r.sp.CopyOut(got, x.buf, 0); err != nil {
			return err
		}
		want := make([]byte, bytes)
		gen(seed, x.peer, r.me, x.k, want)
		for i := range got {
			w := byte(poison)
			if i >= x.off && i < x.off+bytes {
				w = want[i-x.off]
			}
			if got[i] != w {
				return fmt.Errorf("recv %d from rank %d (%d x %s, offset %d): byte %d: got %#x, want %#x",
					x.k, x.peer, x.count, x.dt, x.off, i-x.off, got[i], w)
			}
		}
	}
	return nil
}

func main() {
	mode := flag.String("mode", "all", "all | mismatch | count0 | eager")
	eagerMax := flag.Int("eager-max", 64<<10, "largest Send of -mode eager, bytes")
	count := flag.Int("count", 1000, "elements of the count0 AllReduces")
	replays := flag.Int("replays", 20, "graph replays")
	flag.Parse()
	ctx := context.Background()
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendGPU})
	if err != nil {
		fmt.Printf("p2pgpu: init: FAIL: %v\n", err)
		os.Exit(1)
	}
	drv, err := cuda.Load()
	if err != nil {
		fmt.Printf("p2pgpu: driver: FAIL: %v\n", err)
		os.Exit(1)
	}
	sp, err := membuf.NewDevice(drv, c.Device())
	if err != nil {
		fmt.Printf("p2pgpu: device: FAIL: %v\n", err)
		os.Exit(1)
	}
	r := &rig{c: c, sp: sp, me: c.Rank(), n: c.Size()}
	switch *mode {
	case "mismatch":
		r.mismatch(ctx)
	case "count0":
		r.count0(ctx, *count)
	case "eager":
		r.eager(ctx, *eagerMax)
		if err := c.Close(); err != nil {
			r.report("close", err)
		}
	default:
		r.all(ctx, *replays)
		if err := c.Close(); err != nil {
			r.report("close", err)
		}
	}
	fmt.Printf("p2pgpu: rank %d: %d cases, %d failed\n", r.me, r.cases, r.fails)
	if r.fails > 0 {
		os.Exit(1)
	}
}

func (r *rig) all(ctx context.Context, replays int) {
	n, me := r.n, r.me
	next, prev := (me+1)%n, (me+n-1)%n
	seed := uint64(1)
	for _, dt := range dtypes {
		for _, cnt := range []int{0, 1, 7, 4095, 1<<20 + 3} {
			off := 0
			if cnt%2 == 1 {
				off = dt.Size() // off 16-byte boundaries
			}
			seed++
			xs := []xfer{{send: true, peer: next, count: cnt, dt: dt}, {peer: prev, count: cnt, dt: dt, off: off}}
			r.report(fmt.Sprintf("sendrecv ring %s x %d", dt, cnt), r.run(ctx, seed, xs))
		}
	}
	// All pairs, Recvs first and peers in reverse, self included, then 11
	// more Sends to the next rank.
	seed++
	var xs []xfer
	for p := n - 1; p >= 0; p-- {
		xs = append(xs, xfer{peer: p, count: 1000 + 17*p + 5*me, dt: comm.Float32, off: 4 * (p % 2)})
	}
	for p := n - 1; p >= 0; p-- {
		xs = append(xs, xfer{send: true, peer: p, count: 1000 + 17*me + 5*p, dt: comm.Float32})
	}
	for k := 1; k <= 11; k++ {
		xs = append(xs, xfer{send: true, peer: next, k: k, count: 300 * k, dt: comm.Uint8},
			xfer{peer: prev, k: k, count: 300 * k, dt: comm.Uint8})
	}
	r.report("all pairs reversed, self, 11 repeats", r.run(ctx, seed, xs))

	for _, cnt := range []int{0, 1, 7, 4095, 1<<20 + 3} {
		r.report(fmt.Sprintf("alltoall f32 x %d", cnt), r.alltoall(ctx, cnt))
	}
	for it := 0; it < 3; it++ {
		r.report(fmt.Sprintf("alltoallv random %d", it), r.alltoallv(ctx, uint64(100+it)))
	}
	for _, root := range []int{0, n - 1} {
		for _, cnt := range []int{1, 4095, 1<<20 + 3} {
			r.report(fmt.Sprintf("gather root %d x %d", root, cnt), r.gather(ctx, root, cnt, true))
			r.report(fmt.Sprintf("scatter root %d x %d", root, cnt), r.gather(ctx, root, cnt, false))
		}
	}
	r.report(fmt.Sprintf("graph ring replayed %d times", replays), r.graph(ctx, replays))
}

// block fills the bytes rank src sends rank dst in a blocked call.
func blockBytes(seed uint64, src, dst, n int) []byte {
	b := make([]byte, n)
	gen(seed, src, dst, 0, b)
	return b
}

// blocked runs call over send/recv buffers of nblocks*bytes, fills send
// block p with blockBytes(seed, me, p) where sends[p], and checks recv
// block p against blockBytes(seed, p, me) where recvs[p] (others poisoned).
func (r *rig) blocked(ctx context.Context, seed uint64, sizes func(src, dst int) int, sends, recvs func(p int) bool,
	call func(send, recv uintptr) error) error {
	n, me := r.n, r.me
	sOff, rOff := make([]int, n+1), make([]int, n+1)
	for p := range n {
		sOff[p+1] = sOff[p] + sizes(me, p)
		rOff[p+1] = rOff[p] + sizes(p, me)
	}
	sb, err := r.sp.Alloc(sOff[n] + guard)
	if err != nil {
		return err
	}
	defer func() { _ = r.sp.Free(sb) }()
	rb, err := r.sp.Alloc(rOff[n] + guard)
	if err != nil {
		return err
	}
	defer func() { _ = r.sp.Free(rb) }()
	in := make([]byte, sOff[n])
	for p := range n {
		if sends(p) {
			copy(in[sOff[p]:], blockBytes(seed, me, p, sizes(me, p)))
		}
	}
	if err := r.sp.CopyIn(sb, 0, in); err != nil {
		return err
	}
	if err := r.sp.Fill(rb, 0, rOff[n]+guard, poison); err != nil {
		return err
	}
	if err := call(sb.Ptr, rb.Ptr); err != nil {
		return err
	}
	if err := r.sp.Sync(ctx); err != nil {
		return err
	}
	if err := r.c.Err(); err != nil {
		return err
	}
	got := make([]byte, rOff[n]+guard)
	if err := r.sp.CopyOut(got, rb, 0); err != nil {
		return err
	}
	want := make([]byte, len(got))
	for i := range want {
		want[i] = poison
	}
	for p := range n {
		if recvs(p) {
			copy(want[rOff[p]:], blockBytes(seed, p, me, sizes(p, me)))
		}
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("recv byte %d: got %#x, want %#x", i, got[i], want[i])
		}
	}
	return nil
}

func every(int) bool { return true }

func (r *rig) alltoall(ctx context.Context, cnt int) error {
	size := func(int, int) int { return 4 * cnt }
	return r.blocked(ctx, uint64(cnt)+7, size, every, every, func(s, d uintptr) error {
		return r.c.AllToAll(ctx, s, d, cnt, comm.Float32, r.sp.Stream())
	})
}

func (r *rig) alltoallv(ctx context.Context, seed uint64) error {
	n := r.n
	count := func(src, dst int) int {
		v := rand.New(rand.NewPCG(seed, uint64(src*n+dst))).IntN(5000)
		if v%4 == 0 {
			return 0
		}
		return v
	}
	size := func(src, dst int) int { return 2 * count(src, dst) }
	sc, sd, rc, rd := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
	for p := range n {
		sc[p], rc[p] = count(r.me, p), count(p, r.me)
		if p > 0 {
			sd[p], rd[p] = sd[p-1]+sc[p-1], rd[p-1]+rc[p-1]
		}
	}
	return r.blocked(ctx, seed, size, every, every, func(s, d uintptr) error {
		return r.c.AllToAllv(ctx, s, sc, sd, d, rc, rd, comm.BFloat16, r.sp.Stream())
	})
}

// gather: Gather (every rank's block to root) or Scatter (root's blocks out).
func (r *rig) gather(ctx context.Context, root, cnt int, gather bool) error {
	me := r.me
	// Gather moves a block from every rank to root, Scatter from root to every rank.
	size := func(src, dst int) int {
		if gather && dst == root || !gather && src == root {
			return 8 * cnt
		}
		return 0
	}
	sends := func(p int) bool { return size(me, p) > 0 }
	recvs := func(p int) bool { return size(p, me) > 0 }
	if gather {
		return r.blocked(ctx, uint64(root*31+cnt), size, sends, recvs, func(s, d uintptr) error {
			return r.c.Gather(ctx, s, d, cnt, comm.Uint64, root, r.sp.Stream())
		})
	}
	return r.blocked(ctx, uint64(root*37+cnt), size, sends, recvs, func(s, d uintptr) error {
		return r.c.Scatter(ctx, s, d, cnt, comm.Uint64, root, r.sp.Stream())
	})
}

// graph captures a ring exchange once and replays it with new inputs.
func (r *rig) graph(ctx context.Context, replays int) error {
	const cnt = 100003
	n, me := r.n, r.me
	next, prev := (me+1)%n, (me+n-1)%n
	sb, err := r.sp.Alloc(4 * cnt)
	if err != nil {
		return err
	}
	defer func() { _ = r.sp.Free(sb) }()
	rb, err := r.sp.Alloc(4*cnt + guard)
	if err != nil {
		return err
	}
	defer func() { _ = r.sp.Free(rb) }()
	if err := r.sp.BeginCapture(); err != nil {
		return err
	}
	g := comm.NewGroup()
	if err := g.Send(r.c, sb.Ptr, cnt, comm.Float32, next, r.sp.Stream()); err != nil {
		return err
	}
	if err := g.Recv(r.c, rb.Ptr, cnt, comm.Float32, prev, r.sp.Stream()); err != nil {
		return err
	}
	runErr := g.Run(ctx)
	gr, err := r.sp.EndCapture()
	if err := errors.Join(runErr, err); err != nil {
		return err
	}
	defer func() { _ = gr.Close() }()
	for it := 0; it < replays; it++ {
		seed := uint64(5000 + it)
		in := make([]byte, 4*cnt)
		gen(seed, me, next, 0, in)
		if err := r.sp.CopyIn(sb, 0, in); err != nil {
			return err
		}
		if err := r.sp.Fill(rb, 0, 4*cnt+guard, poison); err != nil {
			return err
		}
		if err := gr.Launch(); err != nil {
			return err
		}
		if err := r.sp.Sync(ctx); err != nil {
			return err
		}
		got := make([]byte, 4*cnt+guard)
		if err := r.sp.CopyOut(got, rb, 0); err != nil {
			return err
		}
		want := make([]byte, 4*cnt)
		gen(seed, prev, me, 0, want)
		for i := range got {
			w := byte(poison)
			if i < len(want) {
				w = want[i]
			}
			if got[i] != w {
				return fmt.Errorf("replay %d: byte %d: got %#x, want %#x", it, i, got[i], w)
			}
		}
	}
	return nil
}

// mismatch: rank 0 sends 100 float32 to rank 1, which expects 101.
func (r *rig) mismatch(ctx context.Context) {
	if r.me > 1 {
		r.report("mismatch (bystander)", nil)
		return
	}
	t0 := time.Now()
	buf, err := r.sp.Alloc(4 * 101)
	if err != nil {
		r.report("mismatch", err)
		return
	}
	g := comm.NewGroup()
	if r.me == 0 {
		err = g.Send(r.c, buf.Ptr, 100, comm.Float32, 1, r.sp.Stream())
	} else {
		err = g.Recv(r.c, buf.Ptr, 101, comm.Float32, 0, r.sp.Stream())
	}
	if err == nil {
		err = g.Run(ctx)
	}
	if err == nil {
		err = r.sp.Sync(ctx)
	}
	if err == nil && r.me == 0 {
		// The Send was eager and completed: rank 0 learns of the rejection
		// from its next launch that waits on rank 1.
		err = r.c.Recv(ctx, buf.Ptr, 1, comm.Float32, 1, r.sp.Stream())
		if err == nil {
			err = r.sp.Sync(ctx)
		}
	}
	if err == nil {
		// The kernels recorded the disagreement; the next call reports it.
		err = r.c.AllReduce(ctx, buf.Ptr, buf.Ptr, 1, comm.Float32, comm.Sum, r.sp.Stream())
	}
	took := time.Since(t0)
	switch {
	case err == nil:
		r.report("mismatch", errors.New("no error for 100 against 101 elements"))
	case !errors.Is(err, collectives.ErrInvalidCount):
		r.report("mismatch", fmt.Errorf("error does not wrap ErrInvalidCount: %w", err))
	case took > 60*time.Second:
		r.report("mismatch", fmt.Errorf("error after %s: %w", took, err))
	default:
		fmt.Printf("p2pgpu: rank %d: mismatch error after %s: %v\n", r.me, took.Round(time.Millisecond), err)
		r.report("mismatch", nil)
	}
}

// count0: rank 1 makes the second of four AllReduces with count 0.
// (A call left out altogether cannot be told by numbers: the ranks'
// numbers then agree call by call, and only the last call finds no peer.)
func (r *rig) count0(ctx context.Context, count int) {
	name := fmt.Sprintf("count0 x %d", count)
	buf, err := r.sp.Alloc(4 * count)
	if err != nil {
		r.report(name, err)
		return
	}
	if err := r.sp.Fill(buf, 0, 4*count, 0); err != nil {
		r.report(name, err)
		return
	}
	t0 := time.Now()
	for call := 1; call <= 4 && err == nil; call++ {
		n := count
		if call == 2 && r.me == 1 {
			n = 0
		}
		if err = r.c.AllReduce(ctx, buf.Ptr, buf.Ptr, n, comm.Float32, comm.Sum, r.sp.Stream()); err == nil {
			err = r.sp.Sync(ctx)
		}
	}
	took := time.Since(t0)
	// Rank 1's third call met the others' second.
	numbers := regexp.MustCompile(`rank (\d)'s call (2|3) met rank (\d) in its call (2|3)\b`)
	switch {
	case err == nil:
		r.report(name, errors.New("no error though rank 1 made call 2 with count 0"))
	case !errors.Is(err, collectives.ErrCallMismatch) && !numbers.MatchString(err.Error()):
		r.report(name, fmt.Errorf("error neither wraps ErrCallMismatch nor names both call numbers: %w", err))
	case took > 60*time.Second:
		r.report(name, fmt.Errorf("error after %s: %w", took, err))
	default:
		fmt.Printf("p2pgpu: rank %d: %s: error after %s (wraps ErrCallMismatch: %v): %v\n", r.me, name,
			took.Round(time.Millisecond), errors.Is(err, collectives.ErrCallMismatch), err)
		r.report(name, nil)
	}
}

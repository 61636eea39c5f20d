// Command gpufaults runs the reliability scenarios on a real GPU machine
// (scripts/gpu/suite.sh runs it; it needs no Go there):
//
//   - kill: started as 2 ranks by `goccl run -np 2 --grace 60s`, rank 1
//     kills itself while rank 0 waits in an AllReduce whose kernel spins on
//     the peer. Rank 0's kernel must leave through the abort flag, rank 0
//     must see an error naming rank 1 within 10 s, and a new communicator
//     on the same GPU must then work (checked against a reference). It
//     prints "gpufaults: kill: PASS ..." or "FAIL ...".
//   - shrink: started as 3 ranks by `goccl run -np 3 --grace 60s`, rank 2
//     kills itself while ranks 0 and 1 wait in an AllReduce. Both must see
//     an error naming rank 2, Shrink the aborted communicator without it
//     into a 2-rank GPU communicator, and run checked AllReduces and an
//     AllToAll on it. It prints "gpufaults: shrink: PASS ..." per survivor.
//   - cycles: N create/destroy cycles of a 1-rank GPU communicator with one
//     checked AllReduce each; device memory, fds and goroutines must come
//     back to their baseline. Prints "gpufaults: cycles: PASS ...".
//
// It never uses multicast.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/membuf"
)

func main() {
	mode := flag.String("mode", "kill", "kill | shrink | cycles")
	cycles := flag.Int("cycles", 1000, "create/destroy cycles (mode cycles)")
	budget := flag.Duration("budget", 90*time.Second, "stop the cycles after this long and report how many ran")
	count := flag.Int("count", 16<<20, "AllReduce elements (float32)")
	flag.Parse()
	var err error
	switch *mode {
	case "kill":
		err = killMode(*count)
	case "shrink":
		err = shrinkMode(*count)
	case "cycles":
		err = cyclesMode(*cycles, *budget)
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		fmt.Printf("gpufaults: %s: FAIL: %v\n", *mode, err)
		os.Exit(1)
	}
}

// rig is one communicator with a device buffer pair of n float32.
type rig struct {
	c          *comm.Comm
	sp         *membuf.DeviceSpace
	send, recv membuf.Buffer
	n          int
}

func newRig(c *comm.Comm, drv cuda.Driver, n int) (*rig, error) {
	sp, err := membuf.NewDevice(drv, c.Device())
	if err != nil {
		return nil, err
	}
	r := &rig{c: c, sp: sp, n: n}
	if r.send, err = sp.Alloc(4 * n); err == nil {
		r.recv, err = sp.Alloc(4 * n)
	}
	if err != nil {
		sp.Close()
		return nil, err
	}
	return r, nil
}

func (r *rig) close() {
	_ = r.sp.Free(r.send)
	_ = r.sp.Free(r.recv)
	_ = r.sp.Close()
}

// allReduce fills send with rank-seeded data, runs one AllReduce(sum),
// waits, and checks recv against the sum of every rank's data computed
// here in float64 (each rank's data is derivable from its seed).
func (r *rig) allReduce(ctx context.Context, seed uint64, check bool) error {
	in := make([]byte, 4*r.n)
	fill(in, seed, r.c.Rank())
	if err := r.sp.CopyIn(r.send, 0, in); err != nil {
		return err
	}
	if err := r.c.AllReduce(ctx, r.send.Ptr, r.recv.Ptr, r.n, comm.Float32, comm.Sum, r.sp.Stream()); err != nil {
		return err
	}
	if err := r.sp.Sync(ctx); err != nil {
		return err
	}
	// The kernel may have left through the abort flag: the communicator
	// says whether the result stands.
	if err := r.c.Err(); err != nil {
		return err
	}
	if !check {
		return nil
	}
	out := make([]byte, 4*r.n)
	if err := r.sp.CopyOut(out, r.recv, 0); err != nil {
		return err
	}
	ref := make([]float64, r.n)
	one := make([]byte, 4*r.n)
	for q := 0; q < r.c.Size(); q++ {
		fill(one, seed, q)
		for i := range ref {
			ref[i] += float64(math.Float32frombits(binary.LittleEndian.Uint32(one[4*i:])))
		}
	}
	for i, want := range ref {
		got := float64(math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])))
		if math.Abs(got-want) > 1e-5*math.Max(1, math.Abs(want)) {
			return fmt.Errorf("element %d: got %g, want %g", i, got, want)
		}
	}
	return nil
}

func fill(b []byte, seed uint64, rank int) {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)+1))
	for i := 0; i < len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(rng.Float64()*2-1)))
	}
}

// healthyJob joins the job as a GPU communicator of size ranks, and runs
// three checked AllReduces of n float32 on it. The launcher stops the other
// ranks once one fails; a survivor must outlive that to report, so the
// process ignores SIGTERM (the launcher's grace period ends it otherwise).
func healthyJob(ctx context.Context, size, n int) (cuda.Driver, *comm.Comm, *rig, error) {
	signal.Ignore(syscall.SIGTERM)
	drv, err := cuda.Load()
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendGPU})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("init: %w", err)
	}
	if c.Size() != size {
		return nil, nil, nil, fmt.Errorf("run me as %d ranks, not %d", size, c.Size())
	}
	r, err := newRig(c, drv, n)
	if err != nil {
		return nil, nil, nil, err
	}
	for it := 0; it < 3; it++ {
		if err := r.allReduce(ctx, uint64(it), true); err != nil {
			return nil, nil, nil, fmt.Errorf("healthy iteration %d: %w", it, err)
		}
	}
	return drv, c, r, nil
}

func killMode(n int) error {
	ctx := context.Background()
	drv, c, r, err := healthyJob(ctx, 2, n)
	if err != nil {
		return err
	}
	if c.Rank() == 1 {
		// Die while rank 0 is inside (or about to enter) the next
		// AllReduce: its kernel spins waiting for this rank.
		fmt.Println("gpufaults: kill: rank 1 dying")
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t0 := time.Now()
	failure := r.allReduce(ctx, 99, false)
	took := time.Since(t0)
	err = failure
	if err == nil {
		return errors.New("AllReduce with a dead peer returned no error")
	}
	var pe *comm.PeerError
	if !errors.As(err, &pe) || pe.Rank != 1 {
		return fmt.Errorf("error does not name rank 1 (after %v): %w", took, err)
	}
	if took > 10*time.Second {
		return fmt.Errorf("error after %v, want < 10s: %w", took, err)
	}
	r.close()
	_ = c.Close()
	// The GPU must still work: a fresh 1-rank communicator on it.
	id, err := comm.NewUniqueID()
	if err != nil {
		return err
	}
	dev := c.Device()
	c2, err := comm.InitRank(ctx, id, 1, 0, comm.Options{Backend: comm.BackendGPU, Device: comm.Device(dev)})
	if err != nil {
		return fmt.Errorf("new communicator after the failure: %w", err)
	}
	defer c2.Close()
	r2, err := newRig(c2, drv, n)
	if err != nil {
		return err
	}
	defer r2.close()
	if err := r2.allReduce(ctx, 7, true); err != nil {
		return fmt.Errorf("AllReduce on a new communicator: %w", err)
	}
	fmt.Printf("gpufaults: kill: PASS: survivor's AllReduce failed after %v naming rank 1 (%v); a new communicator on GPU %d then ran a checked AllReduce\n", took.Round(time.Millisecond), failure, dev)
	return nil
}

func shrinkMode(n int) error {
	ctx := context.Background()
	drv, c, r, err := healthyJob(ctx, 3, n)
	if err != nil {
		return err
	}
	const victim = 2
	if c.Rank() == victim {
		fmt.Println("gpufaults: shrink: rank 2 dying")
		time.Sleep(200 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t0 := time.Now()
	failure := r.allReduce(ctx, 99, false)
	took := time.Since(t0)
	var pe *comm.PeerError
	if failure == nil {
		return errors.New("AllReduce with a dead peer returned no error")
	}
	if !errors.As(failure, &pe) || pe.Rank != victim {
		return fmt.Errorf("error does not name rank %d (after %v): %w", victim, took, failure)
	}
	r.close()
	t1 := time.Now()
	child, err := c.Shrink(ctx, []int{victim}, comm.Options{})
	if err != nil {
		return fmt.Errorf("shrink: %w", err)
	}
	shrunk := time.Since(t1)
	defer c.Close()
	defer child.Close()
	if child.Size() != 2 || child.Rank() != c.Rank() {
		return fmt.Errorf("child is rank %d of %d, want %d of 2", child.Rank(), child.Size(), c.Rank())
	}
	r2, err := newRig(child, drv, n)
	if err != nil {
		return err
	}
	defer r2.close()
	for it := 0; it < 5; it++ {
		if err := r2.allReduce(ctx, uint64(100+it), true); err != nil {
			return fmt.Errorf("AllReduce %d on the shrunk communicator: %w", it, err)
		}
	}
	if err := r2.allToAll(ctx); err != nil {
		return fmt.Errorf("AllToAll on the shrunk communicator: %w", err)
	}
	fmt.Printf("gpufaults: shrink: PASS: rank %d's AllReduce failed after %v naming rank %d; Shrink took %v; 5 AllReduces and an AllToAll on the 2-rank child were correct\n",
		c.Rank(), took.Round(time.Millisecond), victim, shrunk.Round(time.Millisecond))
	return nil
}

// allToAll exchanges n/size float32 per peer whose values say where they
// come from and go to, and checks every received block.
func (r *rig) allToAll(ctx context.Context) error {
	size, me := r.c.Size(), r.c.Rank()
	per := r.n / size
	val := func(src, dst, i int) float32 { return float32(src*1_000_000 + dst*100_000 + i%65536) }
	in := make([]byte, 4*r.n)
	for dst := 0; dst < size; dst++ {
		for i := 0; i < per; i++ {
			binary.LittleEndian.PutUint32(in[4*(dst*per+i):], math.Float32bits(val(me, dst, i)))
		}
	}
	if err := r.sp.CopyIn(r.send, 0, in); err != nil {
		return err
	}
	poison := make([]byte, 4*r.n)
	for i := range poison {
		poison[i] = 0xff
	}
	if err := r.sp.CopyIn(r.recv, 0, poison); err != nil {
		return err
	}
	if err := r.c.AllToAll(ctx, r.send.Ptr, r.recv.Ptr, per, comm.Float32, r.sp.Stream()); err != nil {
		return err
	}
	if err := r.sp.Sync(ctx); err != nil {
		return err
	}
	if err := r.c.Err(); err != nil {
		return err
	}
	out := make([]byte, 4*r.n)
	if err := r.sp.CopyOut(out, r.recv, 0); err != nil {
		return err
	}
	for src := 0; src < size; src++ {
		for i := 0; i < per; i++ {
			got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*(src*per+i):]))
			if want := val(src, me, i); got != want {
				return fmt.Errorf("block from rank %d, element %d: got %g, want %g", src, i, got, want)
			}
		}
	}
	return nil
}

func cyclesMode(cycles int, budget time.Duration) error {
	ctx := context.Background()
	drv, err := cuda.Load()
	if err != nil {
		return err
	}
	dctx, err := drv.PrimaryCtxRetain(0)
	if err != nil {
		return err
	}
	defer drv.PrimaryCtxRelease(0)
	free := func() uint64 {
		_ = drv.CtxSynchronize(dctx)
		f, _, _ := drv.MemGetInfo(dctx)
		return f
	}
	one := func(i int) error {
		id, err := comm.NewUniqueID()
		if err != nil {
			return err
		}
		c, err := comm.InitRank(ctx, id, 1, 0, comm.Options{Backend: comm.BackendGPU, Device: comm.Device(0)})
		if err != nil {
			return err
		}
		r, err := newRig(c, drv, 1<<16)
		if err == nil {
			err = r.allReduce(ctx, uint64(i), i%50 == 0)
			r.close()
		}
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		return err
	}
	// One cycle first, so that lazily made driver state is in the baseline.
	if err := one(0); err != nil {
		return fmt.Errorf("cycle 0: %w", err)
	}
	runtime.GC()
	mem0, fds0, gr0 := free(), countFDs(), runtime.NumGoroutine()
	t0 := time.Now()
	done := 0
	for i := 1; i <= cycles && time.Since(t0) < budget; i++ {
		if err := one(i); err != nil {
			return fmt.Errorf("cycle %d: %w", i, err)
		}
		done++
	}
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	mem1, fds1, gr1 := free(), countFDs(), runtime.NumGoroutine()
	if mem1 < mem0 || fds1 != fds0 || gr1 > gr0 {
		return fmt.Errorf("after %d cycles: device free %d -> %d bytes, fds %d -> %d, goroutines %d -> %d", done, mem0, mem1, fds0, fds1, gr0, gr1)
	}
	fmt.Printf("gpufaults: cycles: PASS: %d create/destroy cycles in %v (%v each); device free memory %d -> %d, fds %d -> %d, goroutines %d -> %d\n",
		done, time.Since(t0).Round(time.Millisecond), (time.Since(t0) / time.Duration(max(done, 1))).Round(time.Microsecond), mem0, mem1, fds0, fds1, gr0, gr1)
	return nil
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

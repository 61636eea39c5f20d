// Command gocclar times goccl's AllReduce (float32 sum) call by call, the
// counterpart of allreduce_mpi.c for bench/mpi/compare. Run it under
// `goccl run -np N`. Rank 0 prints one line per size, "bytes median_us",
// then "memcpy bytes median_us" for a plain copy of the largest size.
// Usage: gocclar [-b MINBYTES] [-e MAXBYTES] [-n ITERS] [-w WARMUP] [-W FIRST] [-bind=false] [-alloc] [-fastest]
//
// With -fastest every figure is the fastest call's rather than the
// median: on a machine that other work shares, the median of a two-rank
// call measures how often both ranks had a CPU as much as the call.
//
// With -alloc the buffers come from comm.AllocSlice (shared memory every
// rank maps), so that the host backend's direct path carries the calls;
// without it they are private Go slices, which go through staging.
//
// Each rank binds its calling thread to CPU rank mod NumCPU, as mpirun
// binds ranks to cores by default: ranks the OS lets float can end up
// taking turns on one CPU of a busy machine, which measures the
// scheduler.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/units"
)

// sizeFlag is a byte count given as nccl-tests' flags take it ("8", "64M").
type sizeFlag int

func (f *sizeFlag) String() string { return fmt.Sprint(int(*f)) }

func (f *sizeFlag) Set(s string) error {
	v, err := units.ParseSize(s)
	if err == nil && v > 1<<40 {
		err = fmt.Errorf("size %q: at most 1 TiB", s)
	}
	*f = sizeFlag(v)
	return err
}

func main() {
	minB, maxB := sizeFlag(8), sizeFlag(64<<20)
	flag.Var(&minB, "b", "smallest size in bytes (K, M, G suffixes as nccl-tests')")
	flag.Var(&maxB, "e", "largest size in bytes")
	iters := flag.Int("n", 200, "timed calls per size")
	warmup := flag.Int("w", 20, "warm-up calls per size")
	first := flag.Int("W", 2000, "warm-up calls of the smallest size before the first")
	bind := flag.Bool("bind", true, "bind each rank to one CPU (rank mod NumCPU), as mpirun does")
	shared := flag.Bool("alloc", false, "buffers from comm.AllocSlice (the direct path) rather than private slices")
	flag.BoolVar(&fastest, "fastest", false, "print the fastest call's time rather than the median")
	flag.Parse()
	if err := run(int(minB), int(maxB), *iters, *warmup, *first, *bind, *shared); err != nil {
		fmt.Fprintln(os.Stderr, "gocclar:", err)
		os.Exit(1)
	}
}

func run(minB, maxB, iters, warmup, first int, bind, shared bool) error {
	ctx := context.Background()
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		return err
	}
	defer c.Close()
	if bind {
		if err := bindTo(c.Rank() % runtime.NumCPU()); err != nil {
			return err
		}
	}
	maxN := maxB / 4
	send, recv := make([]float32, maxN), make([]float32, maxN)
	if shared {
		var regS, regR comm.Registration
		if send, regS, err = comm.AllocSlice[float32](ctx, c, maxN); err != nil {
			return err
		}
		defer regS.Close(ctx)
		if recv, regR, err = comm.AllocSlice[float32](ctx, c, maxN); err != nil {
			return err
		}
		defer regR.Close(ctx)
	}
	for i := range send {
		send[i] = float32((c.Rank() + 1) * (i % 1000))
	}
	t := make([]time.Duration, iters)
	ranks := float32(c.Size() * (c.Size() + 1) / 2)
	for bytes := minB; bytes <= maxB; bytes *= 2 {
		n := bytes / 4
		s, r := send[:n], recv[:n]
		w := warmup
		if bytes == minB {
			w += first
		}
		for i := 0; i < w; i++ {
			if err := comm.AllReduceSlice(ctx, c, s, r, comm.Sum); err != nil {
				return err
			}
		}
		// One monotonic clock read on each side of a call, as MPI_Wtime
		// takes: time.Now reads the wall clock too, which at a small
		// call's scale is not free.
		base := time.Now()
		for i := range t {
			t0 := time.Since(base)
			if err := comm.AllReduceSlice(ctx, c, s, r, comm.Sum); err != nil {
				return err
			}
			t[i] = time.Since(base) - t0
		}
		for i, v := range r {
			if v != ranks*float32(i%1000) {
				return fmt.Errorf("rank %d: %d bytes: element %d is %g, want %g", c.Rank(), bytes, i, v, ranks*float32(i%1000))
			}
		}
		if c.Rank() == 0 {
			fmt.Printf("%d %.3f\n", bytes, median(t))
		}
	}
	if c.Rank() == 0 {
		base := time.Now()
		for i := range t[:min(len(t), 50)] {
			t0 := time.Since(base)
			copy(recv, send)
			t[i] = time.Since(base) - t0
		}
		fmt.Printf("memcpy %d %.3f\n", maxN*4, median(t[:min(len(t), 50)]))
	}
	return c.Barrier(ctx)
}

// bindTo binds the thread that makes the calls to CPU cpu and keeps the
// calling goroutine on it. The process's other threads float: bound to
// the same CPU, the runtime's and the communicator's background work
// would wait there behind a spinning rank.
func bindTo(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("bind to CPU %d: %w", cpu, err)
	}
	return nil
}

// fastest makes median report the fastest time instead (-fastest).
var fastest bool

// median is the median of t in microseconds (the least with -fastest).
func median(t []time.Duration) float64 {
	s := slices.Clone(t)
	slices.Sort(s)
	if fastest {
		return float64(s[0].Nanoseconds()) / 1e3
	}
	return float64(s[len(s)/2].Nanoseconds()) / 1e3
}

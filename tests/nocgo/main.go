// Command nocgo is the program tests/nocgo_test.go builds with
// CGO_ENABLED=0 and runs as the ranks of `goccl run`, to show that a
// program built without cgo (a static binary) runs on the host backend and
// that the GPU backend refuses it clearly:
//
//   - -mode allreduce: a communicator with the backend GOCCL_BACKEND names
//     (auto picks host: the driver cannot be loaded), then AllReduce(Sum)
//     of int64 and float64 at several counts. Rank r's input is drawn from
//     (-seed, r); each rank draws every rank's input itself, sums it as the
//     reference and compares every element of a result buffer that starts
//     poisoned. The float64 inputs are multiples of 1/8 below 2^20, so that
//     their sums are exact in any order.
//   - -mode gpu: InitFromEnv with the GPU backend must fail with an error
//     that wraps comm.ErrNoDriver and says the build lacks cgo.
//
// Each rank prints "nocgo: rank R of N: backend B: CASE: PASS" (or FAIL
// with the reason) per case and exits 1 on any failure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"time"
	"unsafe"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/launcher"
)

func main() {
	mode := flag.String("mode", "allreduce", "allreduce or gpu")
	seed := flag.Uint64("seed", 1, "seed of the ranks' inputs")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var fails int
	switch *mode {
	case "allreduce":
		fails = allReduce(ctx, *seed)
	case "gpu":
		fails = gpuRefused(ctx)
	default:
		fmt.Fprintf(os.Stderr, "nocgo: -mode %q: want allreduce or gpu\n", *mode)
		os.Exit(2)
	}
	if fails > 0 {
		os.Exit(1)
	}
}

// cases are the element counts: one element, an odd few, and enough for
// the host backend's chunked algorithm.
var cases = []int{1, 7, 4095, 1<<18 + 3}

func allReduce(ctx context.Context, seed uint64) int {
	c, err := comm.InitFromEnv(ctx, comm.Options{})
	if err != nil {
		fmt.Printf("nocgo: rank %s: init: FAIL: %v\n", os.Getenv(launcher.EnvRank), err)
		return 1
	}
	defer c.Close()
	fails := 0
	for _, n := range cases {
		for _, dt := range []string{"int64", "float64"} {
			name := fmt.Sprintf("allreduce %s x %d", dt, n)
			err := checkSum(ctx, c, seed, dt, n)
			if err != nil {
				fails++
				fmt.Printf("nocgo: rank %d of %d: backend %s: %s: FAIL: %v\n", c.Rank(), c.Size(), c.BackendName(), name, err)
				continue
			}
			fmt.Printf("nocgo: rank %d of %d: backend %s: %s: PASS\n", c.Rank(), c.Size(), c.BackendName(), name)
		}
	}
	return fails
}

// input is rank r's i-th element of the case (dt, n) as an int64 (the
// float64 case divides it by 8).
func input(seed uint64, dt string, n, r int) []int64 {
	rng := rand.New(rand.NewPCG(seed^uint64(n)<<20^uint64(len(dt)), uint64(r)))
	out := make([]int64, n)
	for i := range out {
		if dt == "int64" {
			out[i] = int64(rng.Uint64()) // sums wrap alike on every rank
		} else {
			out[i] = rng.Int64N(1<<23) - 1<<22
		}
	}
	return out
}

func checkSum(ctx context.Context, c *comm.Comm, seed uint64, dt string, n int) error {
	want := make([]int64, n)
	for r := 0; r < c.Size(); r++ {
		for i, v := range input(seed, dt, n, r) {
			want[i] += v
		}
	}
	mine := input(seed, dt, n, c.Rank())
	send := make([]uint64, n)
	recv := make([]uint64, n)
	for i := range recv {
		recv[i] = 0x7ff4_dead_beef_0bad // poison: a NaN, and no sum of the inputs
	}
	ty := comm.Int64
	for i, v := range mine {
		send[i] = uint64(v)
	}
	if dt == "float64" {
		ty = comm.Float64
		for i, v := range mine {
			send[i] = math.Float64bits(float64(v) / 8)
		}
	}
	err := c.AllReduce(ctx, uintptr(unsafe.Pointer(&send[0])), uintptr(unsafe.Pointer(&recv[0])), n, ty, comm.Sum, 0)
	runtime.KeepAlive(send)
	runtime.KeepAlive(recv)
	if err != nil {
		return err
	}
	for i, w := range want {
		got, ok := int64(recv[i]), true
		if dt == "float64" {
			f := math.Float64frombits(recv[i])
			got = int64(f * 8)
			ok = f*8 == float64(got)
		}
		if !ok || got != w {
			return fmt.Errorf("element %d of %d: got bits %#x, want the sum %d (/8 for float64)", i, n, recv[i], w)
		}
	}
	return nil
}

// gpuRefused: the GPU backend cannot start in a build without cgo, and
// says so with an error callers can test for. A rank whose own init
// failed gets an error wrapping comm.ErrNoDriver; a rank that a peer's
// failure reached first gets that peer's, as a PeerError naming it, with
// its text (a sentinel does not cross processes). The first rank to fail
// always reports its own.
func gpuRefused(ctx context.Context) int {
	rank := os.Getenv(launcher.EnvRank)
	c, err := comm.InitFromEnv(ctx, comm.Options{Backend: comm.BackendGPU})
	var pe *comm.PeerError
	switch {
	case err == nil:
		fmt.Printf("nocgo: rank %s: gpu: FAIL: the GPU backend started (backend %s)\n", rank, c.BackendName())
		_ = c.Close()
		return 1
	case !strings.Contains(err.Error(), "built with CGO_ENABLED=0: the GPU backend needs cgo"):
		fmt.Printf("nocgo: rank %s: gpu: FAIL: the error does not name the cause: %v\n", rank, err)
		return 1
	case errors.Is(err, comm.ErrNoDriver):
		fmt.Printf("nocgo: rank %s: gpu: PASS (own error, wraps comm.ErrNoDriver): %v\n", rank, err)
	case errors.As(err, &pe) && fmt.Sprint(pe.Rank) != rank && errors.Is(err, comm.ErrAborted):
		fmt.Printf("nocgo: rank %s: gpu: PASS (rank %d's failure): %v\n", rank, pe.Rank, err)
	default:
		fmt.Printf("nocgo: rank %s: gpu: FAIL: neither comm.ErrNoDriver nor a peer's failure: %v\n", rank, err)
		return 1
	}
	return 0
}

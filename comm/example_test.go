package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/onheap"
)

// The examples run on the host backend, so that `go test` runs them on any
// machine: buffers are host memory, and the stream argument (a CUstream on
// GPUs) is 0. On GPUs the calls are the same with device pointers and the
// caller's stream.

// ptr gives a Go slice's address for a call. The backend reads and writes
// the memory behind it, so the caller keeps the slice alive until the call
// is done (runtime.KeepAlive after it), and on the heap: a slice whose
// address leaves only as a uintptr may be put on the goroutine's stack,
// which moves.
func ptr[T any](s []T) uintptr { return onheap.Addr(s) }

// eachRank runs f on every communicator at once, as the ranks of one job
// run, and returns each rank's error.
func eachRank(comms []*comm.Comm, f func(c *comm.Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errs
}

func closeAll(comms []*comm.Comm) {
	eachRank(comms, func(c *comm.Comm) error { return c.Close() })
}

// Two ranks in one process average a gradient with AllReduce.
func ExampleInitAll() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	grads := [][]float32{{1, 2, 3, 4}, {3, 4, 5, 6}}
	errs := eachRank(comms, func(c *comm.Comm) error {
		g := grads[c.Rank()]
		// In place: send and recv are the same buffer.
		err := c.AllReduce(ctx, ptr(g), ptr(g), len(g), comm.Float32, comm.Avg, 0)
		runtime.KeepAlive(g)
		return err
	})
	fmt.Println(errors.Join(errs...), grads[0], grads[1])
	// Output: <nil> [2 3 4 5] [2 3 4 5]
}

// Rank 0 makes a unique id and hands it to every rank (here through a
// variable; between processes, as a string through a file, an environment
// variable or the framework's own store); each rank calls InitRank with it.
func ExampleInitRank() {
	ctx := context.Background()
	id, err := comm.NewUniqueID() // on rank 0
	if err != nil {
		fmt.Println(err)
		return
	}
	s := id.String() // what rank 0 publishes

	const nranks = 2
	out := make([][]int32, nranks)
	var wg sync.WaitGroup
	for rank := range nranks {
		wg.Add(1)
		go func() { // in a real job: one process per rank
			defer wg.Done()
			id, err := comm.ParseUniqueID(s)
			if err != nil {
				fmt.Println(err)
				return
			}
			c, err := comm.InitRank(ctx, id, nranks, rank, comm.Options{Backend: comm.BackendHost})
			if err != nil {
				fmt.Println(err)
				return
			}
			defer c.Close()
			buf := []int32{0, 0, 0}
			if rank == 0 {
				buf = []int32{7, 8, 9}
			}
			if err := c.Broadcast(ctx, ptr(buf), ptr(buf), len(buf), comm.Int32, 0, 0); err != nil {
				fmt.Println(err)
			}
			runtime.KeepAlive(buf)
			out[rank] = buf
		}()
	}
	wg.Wait()
	fmt.Println(out)
	// Output: [[7 8 9] [7 8 9]]
}

// Under a launcher (goccl run, torchrun, mpirun, srun) every process joins
// with InitFromEnv; the launcher's variables say its rank, the job's size
// and where rank 0 listens.
func ExampleInitFromEnv() {
	ctx := context.Background()
	c, err := comm.InitFromEnv(ctx, comm.Options{}) // Backend "" is auto: GPUs where there are any
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Printf("rank %d of %d on %s, device %d\n", c.Rank(), c.Size(), c.BackendName(), c.Device())
}

// Registration lets peers write into a buffer directly, which is what puts
// large calls on the copy engines. Register takes memory the framework
// already has (any cuMemAlloc memory on GPUs); Alloc gives registered memory.
// Both are collective. A backend that cannot register (the host backend)
// returns ErrNotSupported, and the same calls then run on plain memory.
func ExampleComm_Register() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	bufs := [][]float32{{1, 1}, {2, 2}}
	errs := eachRank(comms, func(c *comm.Comm) error {
		b := bufs[c.Rank()]
		size := uint64(len(b)) * uint64(unsafe.Sizeof(b[0]))
		reg, err := c.Register(ctx, ptr(b), size)
		switch {
		case errors.Is(err, comm.ErrNotSupported):
			// Plain memory: the same call, through staging.
		case err != nil:
			return err
		default:
			// Deregister, on every rank, before the memory is freed.
			defer reg.Close(ctx)
		}
		err = c.AllReduce(ctx, ptr(b), ptr(b), len(b), comm.Float32, comm.Sum, 0)
		runtime.KeepAlive(b)
		return err
	})
	fmt.Println(errors.Join(errs...), bufs)
	// Output: <nil> [[3 3] [3 3]]
}

// A Group issues several calls together, here on both ranks of this
// process from one goroutine; its collectives on one communicator may be
// fused into fewer launches.
func ExampleGroup() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	weights := [][]float32{{1, 2}, {3, 4}}
	biases := [][]float32{{10}, {20}}
	g := comm.NewGroup()
	for r, c := range comms {
		// Each method checks its arguments now and records the call.
		if err := g.AllReduce(c, ptr(weights[r]), ptr(weights[r]), 2, comm.Float32, comm.Sum, 0); err != nil {
			fmt.Println(err)
			return
		}
		if err := g.AllReduce(c, ptr(biases[r]), ptr(biases[r]), 1, comm.Float32, comm.Max, 0); err != nil {
			fmt.Println(err)
			return
		}
	}
	err = g.Run(ctx) // every rank's part at once
	runtime.KeepAlive(weights)
	runtime.KeepAlive(biases)
	fmt.Println(err, weights, biases)
	// Output: <nil> [[4 6] [4 6]] [[20] [20]]
}

// Sends and Recvs in one Group never deadlock, whatever their order: here
// every rank sends to the next and receives from the previous, a ring
// shift.
func ExampleGroup_Send() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1, 2}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	n := len(comms)
	send := [][]int32{{0}, {1}, {2}}
	recv := [][]int32{{-1}, {-1}, {-1}}
	errs := eachRank(comms, func(c *comm.Comm) error {
		r := c.Rank()
		g := comm.NewGroup()
		if err := g.Send(c, ptr(send[r]), 1, comm.Int32, (r+1)%n, 0); err != nil {
			return err
		}
		if err := g.Recv(c, ptr(recv[r]), 1, comm.Int32, (r+n-1)%n, 0); err != nil {
			return err
		}
		return g.Run(ctx)
	})
	runtime.KeepAlive(send)
	fmt.Println(errors.Join(errs...), recv)
	// Output: <nil> [[2] [0] [1]]
}

// AllToAll sends block p of every rank's buffer to rank p, as the expert
// dispatch of a mixture-of-experts layer does.
func ExampleComm_AllToAll() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	send := [][]float32{{0, 1}, {10, 11}} // rank r's block p goes to rank p
	recv := [][]float32{make([]float32, 2), make([]float32, 2)}
	errs := eachRank(comms, func(c *comm.Comm) error {
		r := c.Rank()
		return c.AllToAll(ctx, ptr(send[r]), ptr(recv[r]), 1, comm.Float32, 0)
	})
	runtime.KeepAlive(send)
	fmt.Println(errors.Join(errs...), recv)
	// Output: <nil> [[0 10] [1 11]]
}

// Abort, from any goroutine, ends every wait on the communicator; the
// other ranks' calls then fail too, with an error naming the rank that
// aborted. Close must still be called.
func ExampleComm_Abort() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	buf := []float32{1}
	// Rank 1 gives up (say its data loader failed) instead of joining.
	comms[1].Abort(errors.New("data loader failed"))
	err = comms[0].AllReduce(ctx, ptr(buf), ptr(buf), 1, comm.Float32, comm.Sum, 0)
	runtime.KeepAlive(buf)

	var pe *comm.PeerError
	fmt.Println(errors.Is(err, comm.ErrAborted), errors.As(err, &pe) && pe.Rank == 1)
	fmt.Println(comms[1].Err() != nil)
	// Output:
	// true true
	// true
}

// Options.Timeout (or GOCCL_TIMEOUT) bounds how long a call waits for a
// peer; here rank 1 never joins the AllReduce. The communicator is then
// unusable on every rank, as after an Abort: a framework restarts the job
// or makes a new communicator of the survivors (Shrink).
func ExampleOptions_timeout() {
	ctx := context.Background()
	opts := comm.Options{Backend: comm.BackendHost, Timeout: 200 * time.Millisecond}
	comms, err := comm.InitAll(ctx, []int{0, 1}, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	buf := []float32{1}
	err = comms[0].AllReduce(ctx, ptr(buf), ptr(buf), 1, comm.Float32, comm.Sum, 0)
	runtime.KeepAlive(buf)
	fmt.Println(errors.Is(err, comm.ErrTimeout))
	// Output: true
}

// Arguments are checked before anything is launched; the error names the
// argument and wraps ErrInvalidArgument.
func ExampleComm_AllReduce_invalidArgument() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	err = comms[0].AllReduce(ctx, 0, 0, 4, comm.Float32, comm.Sum, 0) // no buffers
	fmt.Println(errors.Is(err, comm.ErrInvalidArgument))
	// Output: true
}

// Split makes communicators of subsets of the ranks, as tensor- and
// data-parallel groups are made from one job: here even and odd ranks
// (color), each numbered by parent rank (key). Every rank of the parent
// calls it.
func ExampleComm_Split() {
	ctx := context.Background()
	comms, err := comm.InitAll(ctx, []int{0, 1, 2, 3}, comm.Options{Backend: comm.BackendHost})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer closeAll(comms)

	sums := make([][]int32, len(comms))
	errs := eachRank(comms, func(c *comm.Comm) error {
		sub, err := c.Split(ctx, c.Rank()%2, c.Rank(), comm.Options{})
		if err != nil {
			return err
		}
		defer sub.Close()
		v := []int32{int32(c.Rank())}
		err = sub.AllReduce(ctx, ptr(v), ptr(v), 1, comm.Int32, comm.Sum, 0)
		runtime.KeepAlive(v)
		sums[c.Rank()] = v
		return err
	})
	fmt.Println(errors.Join(errs...), sums)
	// Output: <nil> [[2] [4] [2] [4]]
}

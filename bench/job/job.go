package job

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/membuf"
	"github.com/goccl/goccl/transport"
)

// Options choose the backend and how ranks are made.
type Options struct {
	Backend string // "host", "gpu" or "auto" (gpu where a CUDA device exists)
	// InProcess > 0 makes that many ranks in this process with
	// comm.InitAll (rank i on device i). 0 joins the launcher's job, or,
	// with no launcher environment, runs one rank alone.
	InProcess int
	// InProcessFlag is the command-line flag InProcess came from, named
	// in the error when a launcher's job asks for in-process ranks.
	InProcessFlag string
	Timeout       time.Duration // init and bootstrap bound; 0 for comm's default
}

// Job is this process's ranks.
type Job struct {
	Backend string
	Ranks   []bench.Rank
	comms   []*comm.Comm
}

// Open initializes the communicators and their spaces.
func Open(ctx context.Context, o Options) (*Job, error) {
	backend := strings.ToLower(o.Backend)
	if backend == "" || backend == "auto" {
		// The library honours GOCCL_BACKEND under auto; so must the bench,
		// which passes comm an explicit backend.
		if v := os.Getenv("GOCCL_BACKEND"); v != "" {
			backend = strings.ToLower(v)
		}
	}
	var drv cuda.Driver
	switch backend {
	case "", "auto":
		backend = "host"
		if d, err := cuda.Load(); err == nil {
			if n, err := d.DeviceCount(); err == nil && n > 0 {
				backend, drv = "gpu", d
			}
		}
	case "host":
	case "gpu":
		d, err := cuda.Load()
		if err != nil {
			return nil, fmt.Errorf("--backend gpu: %w", err)
		}
		drv = d
	default:
		return nil, fmt.Errorf("%w: backend %q from --backend or GOCCL_BACKEND (want host, gpu or auto)", collectives.ErrInvalidArgument, backend)
	}
	opts := comm.Options{Backend: backend, Timeout: o.Timeout}
	j := &Job{Backend: backend}
	n := o.InProcess
	if n > 0 && launched() {
		what := fmt.Sprintf("%d in-process ranks", n)
		if o.InProcessFlag != "" {
			what = fmt.Sprintf("%s %d (%s)", o.InProcessFlag, n, what)
		}
		return nil, fmt.Errorf("%w: %s inside a launcher's job, whose processes are one rank each: leave %s out under goccl run, or run one process without the launcher", collectives.ErrInvalidArgument, what, cmp.Or(o.InProcessFlag, "in-process ranks"))
	}
	if n == 0 && !launched() {
		n = 1
	}
	if n > 0 {
		devs := make([]int, n)
		for i := range devs {
			devs[i] = i
		}
		cs, err := comm.InitAll(ctx, devs, opts)
		if err != nil {
			return nil, fmt.Errorf("init %d in-process ranks (%s): %w", n, backend, err)
		}
		j.comms = cs
	} else {
		c, err := comm.InitFromEnv(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("init from the launcher's environment (%s): %w", backend, err)
		}
		j.comms = []*comm.Comm{c}
	}
	for _, c := range j.comms {
		var sp membuf.Space = membuf.NewHost()
		if backend == "gpu" {
			d, err := membuf.NewDevice(drv, c.Device())
			if err != nil {
				j.Abort(err)
				_ = j.Close()
				return nil, err
			}
			sp = d
		}
		j.Ranks = append(j.Ranks, bench.Rank{Comm: Adapter{C: c, g: comm.NewGroup()}, Space: sp})
	}
	return j, nil
}

// launched reports whether a launcher's rank variable is set.
func launched() bool {
	for _, v := range []string{"GOCCL_COMM_ID", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"} {
		if _, ok := os.LookupEnv(v); ok {
			return true
		}
	}
	return false
}

// Abort aborts every communicator (after a failure, so that peers stop
// waiting).
func (j *Job) Abort(cause error) {
	for _, c := range j.comms {
		c.Abort(cause)
	}
}

// Close releases the spaces and communicators.
func (j *Job) Close() error {
	var errs []error
	for _, r := range j.Ranks {
		errs = append(errs, r.Space.Close())
	}
	// Close is collective (the GPU backend frees mapped memory behind a
	// barrier), so ranks in one process close concurrently.
	cerrs := make([]error, len(j.comms))
	var wg sync.WaitGroup
	for i, c := range j.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cerrs[i] = c.Close()
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, cerrs...)...)
}

// Adapter presents a comm.Comm as a bench.Comm, bench.PointToPoint and
// bench.Registrar.
type Adapter struct {
	C *comm.Comm
	g *comm.Group // reused by Group: no allocation per call
}

// Rank is the communicator's rank.
func (a Adapter) Rank() int { return a.C.Rank() }

// Size is the communicator's number of ranks.
func (a Adapter) Size() int { return a.C.Size() }

// Bootstrap is the communicator's bootstrap.
func (a Adapter) Bootstrap() transport.Bootstrap { return a.C.Bootstrap() }

// Run dispatches to the collective's method.
func (a Adapter) Run(ctx context.Context, x *collectives.Args) error {
	c := a.C
	if x.Coll.Reduces() && x.Op == collectives.PreMulSum {
		return a.runPreMulSum(ctx, x)
	}
	switch x.Coll {
	case collectives.AllReduce:
		return c.AllReduce(ctx, x.Send, x.Recv, x.Count, x.Type, x.Op, x.Stream)
	case collectives.Broadcast:
		return c.Broadcast(ctx, x.Send, x.Recv, x.Count, x.Type, x.Root, x.Stream)
	case collectives.Reduce:
		return c.Reduce(ctx, x.Send, x.Recv, x.Count, x.Type, x.Op, x.Root, x.Stream)
	case collectives.AllGather:
		return c.AllGather(ctx, x.Send, x.Recv, x.Count, x.Type, x.Stream)
	case collectives.ReduceScatter:
		return c.ReduceScatter(ctx, x.Send, x.Recv, x.Count, x.Type, x.Op, x.Stream)
	}
	return fmt.Errorf("%w: %v", collectives.ErrUnknownCollective, x.Coll)
}

// runPreMulSum runs a call that carries its scalar in Args through an op
// handle made for it (the communicator's API binds the scalar to a handle).
func (a Adapter) runPreMulSum(ctx context.Context, x *collectives.Args) error {
	op, err := a.C.CreatePreMulSum(x.Scalar, x.Type)
	if err != nil {
		return err
	}
	y := *x
	y.Op = op
	err = a.Run(ctx, &y)
	return errors.Join(err, a.C.DestroyOp(op))
}

// Register registers existing memory; release deregisters it.
func (a Adapter) Register(ctx context.Context, ptr uintptr, size int) (func(context.Context) error, error) {
	reg, err := a.C.Register(ctx, ptr, uint64(size))
	if err != nil {
		return nil, err
	}
	return reg.Close, nil
}

// Alloc allocates registered memory; release frees it.
func (a Adapter) Alloc(ctx context.Context, size int) (uintptr, func(context.Context) error, error) {
	p, reg, err := a.C.Alloc(ctx, uint64(size))
	if err != nil {
		return 0, nil, err
	}
	return p, reg.Close, nil
}

// Group records ops in a comm.Group and runs it.
func (a Adapter) Group(ctx context.Context, ops []collectives.P2P) error {
	g := a.g
	if g == nil {
		g = comm.NewGroup()
	}
	for i := range ops {
		o := &ops[i]
		if o.Kind == collectives.SendOp {
			_ = g.Send(a.C, o.Buf, o.Count, o.Type, o.Peer, o.Stream)
		} else {
			_ = g.Recv(a.C, o.Buf, o.Count, o.Type, o.Peer, o.Stream)
		}
	}
	// A bad operation's error is the group's: Run returns it, issuing
	// nothing.
	return g.Run(ctx)
}

// AllToAll calls Comm.AllToAll.
func (a Adapter) AllToAll(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, stream uintptr) error {
	return a.C.AllToAll(ctx, send, recv, count, dt, stream)
}

// AllToAllv calls Comm.AllToAllv.
func (a Adapter) AllToAllv(ctx context.Context, send uintptr, sendCounts, sendDispls []int, recv uintptr, recvCounts, recvDispls []int, dt collectives.DataType, stream uintptr) error {
	return a.C.AllToAllv(ctx, send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt, stream)
}

// Gather calls Comm.Gather.
func (a Adapter) Gather(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, stream uintptr) error {
	return a.C.Gather(ctx, send, recv, count, dt, root, stream)
}

// Scatter calls Comm.Scatter.
func (a Adapter) Scatter(ctx context.Context, send, recv uintptr, count int, dt collectives.DataType, root int, stream uintptr) error {
	return a.C.Scatter(ctx, send, recv, count, dt, root, stream)
}

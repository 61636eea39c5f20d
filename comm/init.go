package comm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/gpu"
	"github.com/goccl/goccl/collectives/host"
	"github.com/goccl/goccl/transport"
)

// joinSpec says which job a rank joins and how it finds rank 0.
type joinSpec struct {
	nranks, rank, localRank int
	id                      UniqueID // zero in file mode until rank 0 makes one
	filePath                string   // file mode: where rank 0 publishes its id
	token                   string   // names the job's Unix sockets

	// ln is rank 0's listener when bound already (children of Split and
	// Shrink); startBootstrap takes it over.
	ln net.Listener
	// conn is another rank's connection to rank 0 when made already (a
	// child of Split over socket pairs); startBootstrap takes it over.
	conn net.Conn
	// hub is the parent's rescue listener (children of Split and Shrink),
	// which the child shares instead of opening its own.
	hub *rescueHub
}

// InitRank joins rank rank of an nranks-rank job whose rank 0 listens at
// id's address. Every rank calls it with the same id and nranks; it
// returns when all have joined and the backend is ready, or fails within
// the init timeout with an error naming the rank at fault.
func InitRank(ctx context.Context, id UniqueID, nranks, rank int, opts Options) (*Comm, error) {
	if err := id.check(); err != nil {
		return nil, joinSpec{nranks: nranks, rank: rank}.err(err)
	}
	env := opts.env()
	localRank := rank
	if info, err := ParseEnv(env, 0); err == nil && info.Size == nranks && info.Rank == rank {
		localRank = info.LocalRank
	}
	return initComm(ctx, joinSpec{nranks: nranks, rank: rank, localRank: localRank, id: id, token: id.Token()}, opts, env)
}

// InitFromEnv joins the job a launcher started: goccl run, torchrun,
// Open MPI's mpirun, PMI or Slurm (see ParseEnv for the order).
func InitFromEnv(ctx context.Context, opts Options) (*Comm, error) {
	env := opts.env()
	info, err := ParseEnv(env, os.Getppid())
	if err != nil {
		return nil, libErr(err)
	}
	spec := joinSpec{nranks: info.Size, rank: info.Rank, localRank: info.LocalRank}
	if info.Addr.IsValid() {
		if spec.id, err = idFromEnv(info.Addr, info.Token); err != nil {
			return nil, rankErr(info.Rank, fmt.Errorf("%s: %w", info.AddrVar, err))
		}
		spec.token = spec.id.Token()
	} else {
		spec.filePath = rendezvousPath(info.JobKey)
		spec.token = jobTokenFor(info)
	}
	return initComm(ctx, spec, opts, env)
}

// InitAll makes one communicator per device in this process (a goroutine
// per rank over loopback); rank i drives devices[i].
func InitAll(ctx context.Context, devices []int, opts Options) ([]*Comm, error) {
	n := len(devices)
	if n == 0 || n > maxRanks {
		return nil, libErr(fmt.Errorf("%w: InitAll with %d devices", collectives.ErrInvalidArgument, n))
	}
	env := opts.env()
	id, err := newUniqueIDOn(env[ifnameVar])
	if err != nil {
		return nil, libErr(err)
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	// A rank that fails on its own (say, out of descriptors before it
	// reached rank 0) cannot tell the others; being in one process, we can.
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range devices {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o := opts
			o.Device = Device(devices[i])
			comms[i], errs[i] = initComm(ictx, joinSpec{nranks: n, rank: i, localRank: i, id: id, token: id.Token()}, o, env)
			if errs[i] != nil {
				cancel()
			}
		}(i)
	}
	wg.Wait()
	if err := rootCause(errs); err != nil {
		for _, c := range comms {
			if c != nil {
				c.Abort(err)
				_ = c.Close()
			}
		}
		return nil, err
	}
	return comms, nil
}

// rootCause picks the error that explains the others: a rank's own
// failure rather than its peers' reports of it.
func rootCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		var pe *collectives.PeerError
		if !errors.As(err, &pe) && !errors.Is(err, context.Canceled) && !errors.Is(err, collectives.ErrTimeout) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

func initComm(ctx context.Context, spec joinSpec, opts Options, env map[string]string) (*Comm, error) {
	set, err := opts.resolve(env)
	if err != nil {
		return nil, spec.err(err)
	}
	if set.rec, err = parseRecorderEnv(env); err != nil {
		return nil, spec.err(err)
	}
	c, err := initResolved(ctx, spec, set)
	return c, spec.err(err)
}

// err gives an init error "goccl: rank N: ", or "goccl: " alone when the
// rank is not one of the job's (InitRank's bad arguments).
func (spec joinSpec) err(err error) error {
	if spec.rank < 0 || spec.rank >= spec.nranks {
		return libErr(err)
	}
	return rankErr(spec.rank, err)
}

// initResolved is initComm once the settings are known (Split and Shrink
// give their children the parent's, recorder settings included).
func initResolved(ctx context.Context, spec joinSpec, set settings) (*Comm, error) {
	if spec.nranks < 1 || spec.nranks > maxRanks {
		return nil, fmt.Errorf("%w: nranks=%d not in [1,%d]", collectives.ErrInvalidArgument, spec.nranks, maxRanks)
	}
	if spec.rank < 0 || spec.rank >= spec.nranks {
		return nil, fmt.Errorf("%w: rank=%d not in [0,%d)", collectives.ErrInvalidArgument, spec.rank, spec.nranks)
	}
	ictx, cancel := context.WithTimeout(ctx, set.timeout)
	defer cancel()
	boot, err := startBootstrap(ictx, spec, set)
	if err != nil {
		return nil, err
	}
	c, err := buildComm(ictx, cancel, boot, spec, set)
	if err != nil {
		if f := boot.failure(); f != nil && ctx.Err() == nil {
			err = f // a peer's failure, which cancelled our init
		}
		boot.abort(err, "init failed: "+err.Error())
		_ = boot.Close()
		return nil, err
	}
	c.registerRecorder()
	set.log.Info("goccl: communicator ready", "rank", c.rank, "nranks", c.size, "backend", c.backendName, "device", c.device)
	return c, nil
}

// startBootstrap binds this rank's fd socket, meets the other ranks and
// starts the health path.
func startBootstrap(ctx context.Context, spec joinSpec, set settings) (*tcpBootstrap, error) {
	// Rank 0 draws the fd sockets' nonce and binds its own at once; the
	// others learn it from the welcome and bind theirs then.
	var nonce uint64
	var fds *fdSocket
	var err error
	if spec.rank == 0 {
		var nb [8]byte
		if _, err := rand.Read(nb[:]); err != nil {
			return nil, fmt.Errorf("fd socket nonce: %w", err)
		}
		nonce = binary.BigEndian.Uint64(nb[:])
		if fds, err = bindFDSocket(spec.token, 0, nonce, set.log); err != nil {
			return nil, err
		}
	}
	b := &tcpBootstrap{
		rank: spec.rank, nranks: spec.nranks, log: set.log, opTimeout: set.timeout,
		hbInterval: set.hbInterval, hbTimeout: heartbeatMisses * set.hbInterval,
		failed: make(chan struct{}), done: make(chan struct{}),
		closedAfter: make([]int64, spec.nranks), closedSig: make(chan struct{}, 1),
	}
	for r := range b.closedAfter {
		b.closedAfter[r] = notClosed
	}
	// A rank that did not run for longer than its peers wait for it (their
	// heartbeat timeout, or a collective timeout set shorter) knows, when
	// it resumes, that it is the one at fault.
	// Not below a few of the heartbeat goroutine's periods, which it
	// measures with.
	b.stallLimit = b.hbTimeout
	if set.timeoutSet {
		b.stallLimit = min(b.stallLimit, set.timeout)
	}
	b.stallLimit = max(b.stallLimit, minStallLimit)
	pid := int32(os.Getpid())
	jc := joinConfig{rank: spec.rank, nranks: spec.nranks, magic: spec.id.Magic(), pid: pid, uid: uint32(os.Getuid()), nonce: nonce, log: set.log}
	switch {
	case spec.nranks == 1:
		b.pids = []int32{pid}
	case spec.rank == 0:
		id := spec.id
		var ln net.Listener
		if spec.filePath != "" {
			ip := loopback4
			if set.ifIP.IsValid() {
				ip = set.ifIP
			}
			if ln, err = listenOn(ip); err == nil {
				id, err = newUniqueIDAt(ln.Addr().(*net.TCPAddr).AddrPort())
				if err == nil {
					err = publishID(spec.filePath, id)
				}
				if err == nil {
					// Every rank has read it once the job forms; remove it
					// then or on failure, so it does not outlive the job.
					defer os.Remove(spec.filePath)
				}
			}
		} else if spec.ln != nil {
			ln = spec.ln
		} else {
			ln, err = net.Listen("tcp", id.Addr().String())
		}
		if err != nil {
			if ln != nil {
				_ = ln.Close()
			}
			fds.close()
			return nil, fmt.Errorf("bootstrap listen on %s: %w", id.Addr(), err)
		}
		jc.magic = id.Magic()
		var peers []*peer
		peers, b.pids, err = rootRendezvous(ctx, ln, jc)
		b.peers = peers
	default:
		resolve := func() (UniqueID, error) { return spec.id, nil }
		if spec.filePath != "" {
			resolve = func() (UniqueID, error) { return readPublishedID(spec.filePath) }
		}
		var p *peer
		if spec.conn != nil {
			// One attempt: the connection leads to this job's rank 0.
			p, b.pids, nonce, _, err = leafHandshake(ctx, spec.conn, jc)
			if err != nil {
				_ = spec.conn.Close()
			}
		} else {
			p, b.pids, jc.magic, nonce, err = leafRendezvous(ctx, resolve, jc)
		}
		if err == nil {
			if fds, err = bindFDSocket(spec.token, spec.rank, nonce, set.log); err != nil {
				_ = p.conn.Close() // rank 0 sees this rank leave and fails the job
			}
		}
		b.peers = []*peer{p}
	}
	if err != nil {
		if fds != nil {
			fds.close()
		}
		return nil, err
	}
	b.fds = fds
	b.magic = jc.magic
	fds.start(b.magic, b.pids)
	b.startHealth()
	return b, nil
}

// buildComm agrees on the backend, builds it and waits for every rank.
func buildComm(ctx context.Context, cancel context.CancelFunc, boot *tcpBootstrap, spec joinSpec, set settings) (*Comm, error) {
	// A peer failing during init cancels our wait, wherever it is.
	boot.setOnFailure(func(error) { cancel() })

	name, err := chooseBackend(set)
	if err != nil {
		return nil, err
	}
	all, err := boot.AllGather(ctx, []byte(name))
	if err != nil {
		return nil, err
	}
	for r, x := range all {
		if string(x) != string(all[0]) {
			return nil, fmt.Errorf("%w: rank %d chose backend %q, rank 0 chose %q (set GOCCL_BACKEND alike on every rank)", ErrMismatch, r, x, all[0])
		}
	}
	device := -1
	if set.device != nil {
		device = *set.device
	}
	if name == BackendGPU && set.factory == nil {
		count, err := probeGPUs()
		if err != nil {
			return nil, fmt.Errorf("gpu backend: %w", err)
		}
		if count <= 0 {
			return nil, errors.New("gpu backend: no CUDA device visible")
		}
		if device < 0 {
			device = spec.localRank % count
		} else if device >= count {
			return nil, fmt.Errorf("%w: device %d, but %d CUDA devices are visible", collectives.ErrInvalidArgument, device, count)
		}
	}
	cfg := BackendConfig{Name: name, Device: device, LocalRank: spec.localRank, Transport: set.transport, Algo: set.algo, Logger: set.log,
		Recorder: set.rec.size, Check: set.check, Env: set.env}
	if set.timeoutSet {
		cfg.Timeout = set.timeout
	}
	factory := set.factory
	if factory == nil {
		factory = defaultBackend
	}
	rescue, err := openRescue(ctx, boot, set.hostID, selfLink(name, device, set.rec.size > 0), set.ifIP, spec.hub)
	if err != nil {
		return nil, err
	}
	// The host backend spans nodes (shared memory inside each, UCX
	// between them), as does the GPU backend (goccl's transports inside
	// each, NCCL between them); the others reach only the ranks of one node.
	cfg.Nodes = rescue.nodes
	if spec.rank == 0 {
		// Once per communicator, before a layout the backend cannot serve
		// fails init, so that the log shows it either way.
		set.log.Info("goccl: nodes: "+nodeLayout(rescue.nodes), "nranks", spec.nranks)
	}
	if name != BackendHost && name != BackendGPU {
		if err := checkOneNode(rescue.nodes, spec.rank); err != nil {
			return nil, err
		}
	}
	be, err := factory(ctx, boot, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s backend: %w", name, err)
	}
	if be == nil {
		return nil, fmt.Errorf("%s backend factory returned nil", name)
	}
	c := &Comm{
		rank: spec.rank, size: spec.nranks, localRank: spec.localRank, device: device,
		backendName: name, backend: be, boot: boot, log: set.log, check: set.check,
		set: set, rescue: rescue,
	}
	c.checked, _ = be.(checkedRunner)
	c.startRecorder(set)
	boot.setOnFailure(c.onPeerFailure)
	boot.setOnPeerClosed(c.onPeerClosed)
	if err := boot.Barrier(ctx); err != nil {
		be.Abort(err)
		_ = be.Close()
		return nil, err
	}
	return c, nil
}

func chooseBackend(set settings) (string, error) {
	switch {
	case set.backend != BackendAuto:
		return set.backend, nil
	case set.factory != nil:
		return "custom", nil
	}
	if n, err := probeGPUs(); err == nil && n > 0 {
		return BackendGPU, nil
	}
	return BackendHost, nil
}

func defaultBackend(ctx context.Context, b transport.Bootstrap, cfg BackendConfig) (collectives.Backend, error) {
	switch cfg.Name {
	case BackendHost:
		return host.New(ctx, b, host.Config{Algo: cfg.Algo, Transport: cfg.Transport, Timeout: cfg.Timeout, Logger: cfg.Logger, Nodes: cfg.Nodes, Env: cfg.Env})
	case BackendGPU:
		return gpu.New(ctx, b, gpu.Config{Device: cfg.Device, Transport: cfg.Transport, Algo: cfg.Algo, Logger: cfg.Logger, Nodes: cfg.Nodes,
			Stamps: cfg.Recorder, Timeout: cfg.Timeout, Check: cfg.Check, Env: cfg.Env})
	}
	return nil, fmt.Errorf("%w: backend %q", collectives.ErrInvalidArgument, cfg.Name)
}

package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Config tunes the host backend. The zero value is ready to use; the
// environment (GOCCL_ALGO, GOCCL_TIMEOUT) fills what it leaves empty.
type Config struct {
	// Algo forces the AllReduce/Reduce algorithm: "oneshot" or "twoshot"
	// (collectives.OneShot/TwoShot). Empty: GOCCL_ALGO, else by size.
	Algo string
	// Transport is GOCCL_TRANSPORT as the communicator read it: "" or
	// "shm"; a GPU transport is an error rather than silently ignored.
	Transport string
	// Timeout bounds every wait for a peer. Zero: GOCCL_TIMEOUT (a Go
	// duration or a number of seconds), else 5 minutes.
	Timeout time.Duration
	// StagingBytes is the size of each of the two staging halves every rank
	// shares; the point-to-point rings of a rank (one per destination) take
	// about as much again, so the shared memory per rank is about three
	// times this, whatever the count. Zero: 2 MiB. At least 4 KiB.
	StagingBytes int
	// OneShotMax is the largest AllReduce/Reduce, in bytes, run one-shot
	// when no algorithm is forced. Zero: 256 KiB.
	OneShotMax int
	// CMAMin, when positive, makes every AllReduce, AllGather, Broadcast
	// and ReduceScatter of at least this many bytes (count × element size)
	// copy straight between the ranks' buffers (cma.go) rather than through
	// staging, between processes through cross-memory attach. Zero:
	// GOCCL_HOST_CMA=1 turns that on, from GOCCL_HOST_CMA_MIN (else 1 MiB);
	// unset, only ranks that share one process, no more of them than
	// CPUs, copy straight. Negative: never. GOCCL_HOST_CMA=0 turns it off
	// whatever this says.
	CMAMin int
	// Logger receives the backend's diagnostics; nil: slog.Default().
	Logger *slog.Logger
	// Nodes names every rank's node (any key, equal for ranks that share
	// one machine). Ranks on several nodes make the backend use shared
	// memory inside each node and UCX between them (multinode.go); nil
	// or one node: shared memory only, and UCX is never loaded.
	Nodes []string
	// Env holds the GOCCL_* settings the backend reads (GOCCL_ALGO,
	// GOCCL_TIMEOUT, GOCCL_HOST_CMA, GOCCL_HOST_CMA_MIN) in place of the
	// process environment, as comm's Options.Env does; nil: the process
	// environment.
	Env map[string]string
}

// getenv reads setting k from Env, else from the process environment.
func (c Config) getenv(k string) string {
	if c.Env != nil {
		return c.Env[k]
	}
	return os.Getenv(k)
}

const (
	defaultTimeout    = 5 * time.Minute
	defaultStaging    = 2 << 20
	defaultOneShotMax = 256 << 10
	minStaging        = 4 << 10
	lineBytes         = 64 // parts handed to ranks are aligned to this
)

// resolve fills defaults from the environment and checks the values.
func (c Config) resolve(nranks int) (Config, error) {
	fromEnv := c.Algo == ""
	if fromEnv {
		c.Algo = c.getenv("GOCCL_ALGO")
	}
	algo, err := collectives.ParseAlgorithm(c.Algo)
	if err != nil {
		return c, err
	}
	switch algo {
	case "", collectives.OneShot, collectives.TwoShot:
	default:
		// Running the host algorithm instead would hide that the forced
		// choice never took effect.
		return c, fmt.Errorf("%w: GOCCL_ALGO=%s is a GPU algorithm; the host backend runs oneshot or twoshot (or leave it unset)",
			collectives.ErrInvalidArgument, algo)
	}
	switch t := strings.ToLower(strings.TrimSpace(c.Transport)); t {
	case "", collectives.TransportSHM:
	default:
		return c, fmt.Errorf("%w: GOCCL_TRANSPORT=%s needs GPUs; the host backend uses shm (or leave it unset)",
			collectives.ErrInvalidArgument, t)
	}
	c.Algo = string(algo)
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
		if s := c.getenv("GOCCL_TIMEOUT"); s != "" {
			if c.Timeout, err = parseTimeout(s); err != nil {
				return c, err
			}
		}
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("%w: timeout %v is negative", collectives.ErrInvalidArgument, c.Timeout)
	}
	if c.StagingBytes == 0 {
		c.StagingBytes = defaultStaging
	}
	if c.StagingBytes < minStaging || c.StagingBytes < nranks*lineBytes || c.StagingBytes%lineBytes != 0 {
		return c, fmt.Errorf("%w: staging %d bytes: want a multiple of %d, at least %d and at least %d per rank",
			collectives.ErrInvalidArgument, c.StagingBytes, lineBytes, minStaging, lineBytes)
	}
	if c.OneShotMax == 0 {
		c.OneShotMax = defaultOneShotMax
	}
	if c.OneShotMax < 0 {
		return c, fmt.Errorf("%w: one-shot limit %d is negative", collectives.ErrInvalidArgument, c.OneShotMax)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func parseTimeout(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil && secs > 0 {
		return time.Duration(secs * float64(time.Second)), nil
	}
	return 0, fmt.Errorf("%w: GOCCL_TIMEOUT=%q (want a duration such as 30s, or seconds)", collectives.ErrInvalidArgument, s)
}

// agreed encodes what every rank must share (a rank that picked another
// algorithm or staging size would take a different number of steps), or
// this rank's configuration error, so that every rank fails together.
func agreed(c Config, err error) []byte {
	if err != nil {
		return append([]byte{1}, err.Error()...)
	}
	b := make([]byte, 1, 32)
	b = binary.LittleEndian.AppendUint64(b, uint64(c.StagingBytes))
	b = binary.LittleEndian.AppendUint64(b, uint64(c.OneShotMax))
	return append(b, c.Algo...)
}

func describeAgreed(b []byte) string {
	if len(b) < 17 || b[0] != 0 {
		return fmt.Sprintf("%q", b)
	}
	algo := string(b[17:])
	if algo == "" {
		algo = "by size"
	}
	return fmt.Sprintf("staging %d, one-shot limit %d, algorithm %s",
		binary.LittleEndian.Uint64(b[1:]), binary.LittleEndian.Uint64(b[9:]), algo)
}

// agreeConfig resolves cfg for n ranks and checks, through one bootstrap
// AllGather, that every rank has the same: a rank whose own settings are
// bad fails every rank, naming it.
func agreeConfig(ctx context.Context, b transport.Bootstrap, cfg Config) (Config, error) {
	rank, n := b.Rank(), b.Size()
	cfg, cerr := cfg.resolve(n)
	mine := agreed(cfg, cerr)
	all, err := b.AllGather(ctx, mine)
	if cerr != nil {
		return cfg, cerr
	}
	if err != nil {
		return cfg, fmt.Errorf("agree on configuration: %w", err)
	}
	for r, got := range all {
		if len(got) > 0 && got[0] == 1 {
			return cfg, fmt.Errorf("%w: rank %d: %s", collectives.ErrInvalidArgument, r, got[1:])
		}
		if string(got) != string(mine) {
			return cfg, fmt.Errorf("%w: rank %d has %s, rank %d has %s",
				collectives.ErrInvalidArgument, r, describeAgreed(got), rank, describeAgreed(mine))
		}
	}
	return cfg, nil
}

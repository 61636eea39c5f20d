package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/collectives"
)

// errUsage wraps every command-line error (exit status 2).
var errUsage = errors.New("conformance: usage")

type placement int

const (
	placeBoth placement = iota
	placeOnly
	placeNone
)

// config is the parsed command line.
type config struct {
	backend    string
	counts     []int
	colls      []collectives.Collective
	types      []collectives.DataType
	ops        []collectives.Op
	roots      string // "all", "ends" (0 and the last rank) or a list
	inplace    placement
	seed       uint64
	large      []int64
	largeTypes []collectives.DataType
	largeOps   []collectives.Op
	graph      int
	stress     int
	inprocess  int
	register   bool // matrix buffers from the communicator's Alloc (registered)
	regUser    bool // matrix buffers from the rank's space, then Register
	timeout    time.Duration
	show       int // failures printed per rank
	p2p        []p2pKind
	roundings  int // 8-bit float results may round this many times (check.Case.Roundings)
}

const usage = `usage: conformance [flags]   (one rank; start it under goccl run, mpirun or torchrun)

  --backend host|gpu|auto    [auto]
  --counts LIST              element counts                    [0,1,7,4095,1048579]
  --colls LIST               collectives, all or none          [all]
  --types LIST               datatypes, or all                 [all]
  --ops LIST                 reduction ops, or all             [all]
  --roots all|ends|LIST      roots of broadcast and reduce; ends = 0 and the last rank [ends]
  --inplace both|only|none   in-place cases too, only, or not  [both]
  --seed N                   base seed of the inputs           [1]
  --p2p LIST                 point-to-point calls: sendrecv, allpairs, alltoall,
                             alltoallv, gather, scatter, all or none (--types,
                             --counts as per-peer counts, --roots, --large apply)  [all]
  --large SIZES              large messages in bytes (K/M/G/Ki/Mi/Gi), e.g. 64Mi,1Gi
  --large-types LIST         their datatypes                   [float32,bfloat16,int32]
  --large-ops LIST           their ops                         [sum,max]
  --graph N                  GPU: capture one call per collective in a CUDA graph, replay N times with new inputs
  --stress N                 N back-to-back mixed collectives on one stream, then check every buffer
  --inprocess N              N ranks in this process (comm.InitAll; UVA on GPUs), no launcher
  --register                 the matrix's buffers come from the communicator's Alloc (GPU:
                             registered, Broadcast/AllGather/AllReduce may take the copy engines;
                             host: shared memory, calls take the direct path)
  --register-user            GPU: the matrix's buffers are the rank's own device memory,
                             registered with Register, as a framework's tensors would be
  --timeout D                bound on the whole run                  [30m]
  --show N                   failures printed per rank               [10]
  --roundings N              8-bit float reductions may round their partials N times
                             (across nodes: once per leg, NCCL's rings once per step)  [1]
`

// allOps is every op, PreMulSum ("mulsum") included.
func allOps() []collectives.Op { return append(collectives.AllOps(), collectives.PreMulSum) }

func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("conformance", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c := &config{}
	var counts, colls, types, ops, inplace, large, largeTypes, largeOps, p2p string
	fs.StringVar(&c.backend, "backend", "auto", "")
	fs.StringVar(&counts, "counts", "0,1,7,4095,1048579", "")
	fs.StringVar(&colls, "colls", "all", "")
	fs.StringVar(&types, "types", "all", "")
	fs.StringVar(&ops, "ops", "all", "")
	fs.StringVar(&c.roots, "roots", "ends", "")
	fs.StringVar(&inplace, "inplace", "both", "")
	fs.Uint64Var(&c.seed, "seed", 1, "")
	fs.StringVar(&large, "large", "", "")
	fs.StringVar(&largeTypes, "large-types", "float32,bfloat16,int32", "")
	fs.StringVar(&largeOps, "large-ops", "sum,max", "")
	fs.IntVar(&c.graph, "graph", 0, "")
	fs.IntVar(&c.stress, "stress", 0, "")
	fs.IntVar(&c.inprocess, "inprocess", 0, "")
	fs.BoolVar(&c.register, "register", false, "")
	fs.BoolVar(&c.regUser, "register-user", false, "")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Minute, "")
	fs.IntVar(&c.show, "show", 10, "")
	fs.StringVar(&p2p, "p2p", "all", "")
	fs.IntVar(&c.roundings, "roundings", 1, "")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if c.roundings < 1 {
		return nil, fmt.Errorf("%w: --roundings %d: must be at least 1", errUsage, c.roundings)
	}
	var err error
	if c.counts, err = parseCounts(counts); err != nil {
		return nil, err
	}
	if strings.EqualFold(colls, "none") {
		c.colls = nil // the point-to-point calls only
	} else if c.colls, err = parseList(colls, "--colls", collectives.AllCollectives, collectives.ParseCollective); err != nil {
		return nil, err
	}
	if c.types, err = parseList(types, "--types", collectives.AllDataTypes, collectives.ParseDataType); err != nil {
		return nil, err
	}
	if c.ops, err = parseList(ops, "--ops", allOps, collectives.ParseOp); err != nil {
		return nil, err
	}
	if c.p2p, err = parseP2P(p2p); err != nil {
		return nil, err
	}
	if c.largeTypes, err = parseList(largeTypes, "--large-types", collectives.AllDataTypes, collectives.ParseDataType); err != nil {
		return nil, err
	}
	if c.largeOps, err = parseList(largeOps, "--large-ops", collectives.AllOps, collectives.ParseOp); err != nil {
		return nil, err
	}
	if large != "" {
		for _, f := range strings.Split(large, ",") {
			s := strings.TrimSuffix(strings.TrimSpace(f), "i") // 64Mi = 64M: powers of 1024 either way
			b, err := bench.ParseSize(s)
			if err != nil || b <= 0 {
				return nil, fmt.Errorf("%w: --large: %q is not a size", errUsage, f)
			}
			c.large = append(c.large, b)
		}
	}
	switch inplace {
	case "both":
		c.inplace = placeBoth
	case "only":
		c.inplace = placeOnly
	case "none":
		c.inplace = placeNone
	default:
		return nil, fmt.Errorf("%w: --inplace %q: want both, only or none", errUsage, inplace)
	}
	if c.roots != "all" && c.roots != "ends" {
		if _, err := parseInts(c.roots); err != nil {
			return nil, fmt.Errorf("%w: --roots %q: want all, ends or a list of ranks", errUsage, c.roots)
		}
	}
	switch c.backend {
	case "host", "gpu", "auto":
	default:
		return nil, fmt.Errorf("%w: --backend %q: want host, gpu or auto", errUsage, c.backend)
	}
	switch {
	case c.graph < 0 || c.stress < 0 || c.inprocess < 0 || c.show < 0:
		return nil, fmt.Errorf("%w: --graph, --stress, --inprocess and --show take counts >= 0", errUsage)
	case c.timeout <= 0:
		return nil, fmt.Errorf("%w: --timeout %v must be positive", errUsage, c.timeout)
	case c.graph > 0 && c.backend == "host":
		return nil, fmt.Errorf("%w: --graph needs the gpu backend", errUsage)
	case c.regUser && c.backend == "host":
		return nil, fmt.Errorf("%w: --register-user needs the gpu backend", errUsage)
	case c.regUser && c.register:
		return nil, fmt.Errorf("%w: --register and --register-user exclude each other", errUsage)
	}
	return c, nil
}

func parseCounts(s string) ([]int, error) {
	v, err := parseInts(s)
	if err != nil {
		return nil, fmt.Errorf("%w: --counts %q: %v", errUsage, s, err)
	}
	for _, n := range v {
		if n < 0 {
			return nil, fmt.Errorf("%w: --counts: count %d is negative", errUsage, n)
		}
	}
	return v, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func parseList[T any](s, flagName string, all func() []T, parse func(string) (T, error)) ([]T, error) {
	if strings.EqualFold(s, "all") {
		return all(), nil
	}
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errUsage, flagName, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// rootsFor lists the roots to test on n ranks.
func (c *config) rootsFor(n int) ([]int, error) {
	switch c.roots {
	case "all":
		r := make([]int, n)
		for i := range r {
			r[i] = i
		}
		return r, nil
	case "ends":
		if n == 1 {
			return []int{0}, nil
		}
		return []int{0, n - 1}, nil
	}
	v, err := parseInts(c.roots)
	if err != nil {
		return nil, fmt.Errorf("%w: --roots: %v", errUsage, err)
	}
	for _, r := range v {
		if r < 0 || r >= n {
			return nil, fmt.Errorf("%w: --roots: root %d not in [0,%d)", errUsage, r, n)
		}
	}
	return v, nil
}

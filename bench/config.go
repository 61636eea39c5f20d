package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/units"
)

// Backend selects where buffers live and which collectives run.
type Backend string

const (
	BackendAuto Backend = "auto" // gpu when a CUDA device is present
	BackendHost Backend = "host" // CPU buffers, the host backend
	BackendGPU  Backend = "gpu"  // GPU buffers, the GPU backend
)

// Average is nccl-tests' -a: how per-rank times combine into the reported one.
type Average int

const (
	AvgRank0 Average = 0 // rank 0's time
	AvgMean  Average = 1 // the mean over ranks (the default)
	AvgMin   Average = 2 // the fastest rank's time
	AvgMax   Average = 3 // the slowest rank's time
)

// Config is a parsed `goccl bench` command line.
type Config struct {
	Coll       collectives.Collective
	P2P        P2PTest // a point-to-point test instead of Coll
	MinBytes   int64
	MaxBytes   int64
	StepFactor int64
	StepBytes  int64
	Iters      int
	Warmup     int
	Check      int // correctness runs per size and placement (nccl-tests -c)
	Types      []collectives.DataType
	Ops        []collectives.Op
	Roots      []int // nil with RootAll: every rank
	RootAll    bool
	Blocking   bool
	Graph      int // -G: graph launches, each replaying Iters captured ops
	Register   int // -R: 0 off, 1 comm.Register, 2 comm.Alloc
	Average    Average
	GPUs       int // -g: ranks (GPUs) driven by this process
	Backend    Backend
	JSON       string
	Plot       string
	Peer       string
	Label      string
	Seed       uint64
}

// ErrUsage wraps every command-line error.
var ErrUsage = errors.New("bench: usage")

// Usage is printed for -h and after a usage error.
const Usage = `usage: goccl bench <all_reduce|broadcast|reduce_scatter|all_gather|reduce|
                    sendrecv|alltoall|gather|scatter> [flags]

nccl-tests' flags:
  -b, --minbytes N     smallest size (K/M/G suffixes, powers of 1024)   [32M]
  -e, --maxbytes N     largest size                                     [32M]
  -f, --stepfactor F   multiply the size by F each step (F > 1)         [1]
  -i, --stepbytes N    else add N bytes each step                       [1M]
  -n, --iters N        timed iterations per size                        [20]
  -w, --warmup_iters N warm-up iterations                               [5]
  -c, --check N        correctness runs per size (0 disables)           [1]
  -d, --datatype T     int8 uint8 int32 uint32 int64 uint64 half float
                       double bfloat16 f8e4m3 f8e5m2, or all            [float]
  -o, --op OP          sum prod max min avg mulsum (each rank scales by
                       its own scalar), or all (not mulsum)             [sum]
  -r, --root R         root rank of broadcast/reduce/gather/scatter,
                       or all                                           [0]
  -z, --blocking 0|1   wait and barrier after every call                [0]
  -G, --cudagraph N    capture the -n iterations in a CUDA graph and
                       launch it N times, as nccl-tests does (GPU)      [0]
  -R, --register 0|1|2 1: buffers registered with Register; 2: from
                       the communicator's Alloc (GPU)                   [0]
  -a, --average 0..3   combine ranks' times: 0 rank 0, 1 mean, 2 min,
                       3 max                                            [1]
  -g, --ngpus N        ranks (GPUs) driven by this one process, without
                       a launcher (comm.InitAll; UVA on GPUs)           [1]
  -t, --nthreads 1     only 1: goccl runs one rank per process; start
                       N of them with goccl run -np N                   [1]
  not taken: nccl-tests' -m -N -p -y -T -C -S -J (an error says why)
goccl's:
  --backend host|gpu|auto   auto is gpu where a CUDA device exists      [auto]
  --json FILE          write every row, the machine and the mode as JSON
  --plot FILE.png      plot busbw against size (log2 axis)
  --peer FILE.json     another run's JSON (e.g. NCCL's) drawn beside
  --label NAME         this run's name in the JSON and the plot         [goccl]
  --seed N             base seed of the check data                      [1]
`

// ParseArgs parses args (the collective name, then flags, in any order).
func ParseArgs(args []string) (Config, error) {
	cfg := Config{
		MinBytes: 32 << 20, MaxBytes: 32 << 20, StepFactor: 1, StepBytes: 1 << 20,
		Iters: 20, Warmup: 5, Check: 1, Average: AvgMean, GPUs: 1,
		Backend: BackendAuto, Label: "goccl", Seed: 1,
	}
	fs := flag.NewFlagSet("goccl bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		minB, maxB, stepB = "32M", "32M", "1M"
		dtype, op, root   = "float", "sum", "0"
		backend           = "auto"
		blocking, avg     int
		factor            int64  = 1
		seed              uint64 = 1
	)
	str := func(p *string, short, long string) {
		fs.StringVar(p, short, *p, "")
		fs.StringVar(p, long, *p, "")
	}
	integer := func(p *int, short, long string) {
		fs.IntVar(p, short, *p, "")
		fs.IntVar(p, long, *p, "")
	}
	str(&minB, "b", "minbytes")
	str(&maxB, "e", "maxbytes")
	str(&stepB, "i", "stepbytes")
	fs.Int64Var(&factor, "f", 1, "")
	fs.Int64Var(&factor, "stepfactor", 1, "")
	integer(&cfg.Iters, "n", "iters")
	integer(&cfg.Warmup, "w", "warmup_iters")
	integer(&cfg.Check, "c", "check")
	str(&dtype, "d", "datatype")
	str(&op, "o", "op")
	str(&root, "r", "root")
	integer(&blocking, "z", "blocking")
	integer(&cfg.Graph, "G", "cudagraph")
	integer(&cfg.Register, "R", "register")
	avg = int(cfg.Average)
	integer(&avg, "a", "average")
	integer(&cfg.GPUs, "g", "ngpus")
	threads := 1
	integer(&threads, "t", "nthreads")
	fs.StringVar(&backend, "backend", backend, "")
	fs.StringVar(&cfg.JSON, "json", "", "")
	fs.StringVar(&cfg.Plot, "plot", "", "")
	fs.StringVar(&cfg.Peer, "peer", "", "")
	fs.StringVar(&cfg.Label, "label", cfg.Label, "")
	fs.Uint64Var(&seed, "seed", seed, "")

	// The collective may come before or after the flags.
	var coll string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return cfg, fmt.Errorf("%w: help requested", ErrUsage)
			}
			return cfg, fmt.Errorf("%w: %v", ErrUsage, unknownFlag(err))
		}
		if fs.NArg() == 0 {
			break
		}
		if coll != "" {
			return cfg, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
		}
		coll, rest = fs.Arg(0), fs.Args()[1:]
	}
	const tests = "all_reduce, broadcast, reduce_scatter, all_gather, reduce, sendrecv, alltoall, gather, scatter"
	if coll == "" {
		return cfg, fmt.Errorf("%w: name a test (%s)", ErrUsage, tests)
	}
	var err error
	if cfg.P2P = parseP2PTest(coll); cfg.P2P == NoP2P {
		if cfg.Coll, err = collectives.ParseCollective(coll); err != nil {
			return cfg, fmt.Errorf("%w: %w (want %s)", ErrUsage, err, tests)
		}
	}
	if cfg.MinBytes, err = ParseSize(minB); err != nil {
		return cfg, fmt.Errorf("%w: -b: %w", ErrUsage, err)
	}
	if cfg.MaxBytes, err = ParseSize(maxB); err != nil {
		return cfg, fmt.Errorf("%w: -e: %w", ErrUsage, err)
	}
	if cfg.StepBytes, err = ParseSize(stepB); err != nil {
		return cfg, fmt.Errorf("%w: -i: %w", ErrUsage, err)
	}
	cfg.StepFactor = factor
	cfg.Blocking = blocking != 0
	cfg.Average = Average(avg)
	cfg.Seed = seed
	if cfg.Types, err = parseTypes(dtype); err != nil {
		return cfg, err
	}
	if cfg.Ops, err = parseOps(op); err != nil {
		return cfg, err
	}
	if strings.EqualFold(root, "all") {
		cfg.RootAll = true
	} else {
		r, err := strconv.Atoi(root)
		if err != nil || r < 0 {
			return cfg, fmt.Errorf("%w: -r: root %q is not a rank number or all", ErrUsage, root)
		}
		cfg.Roots = []int{r}
	}
	if threads != 1 {
		// nccl-tests' -t is threads per process, each with its own ranks.
		return cfg, fmt.Errorf("%w: -t %d: goccl runs one rank per process (no threads); for %d ranks use `goccl run -np %d goccl bench ...`, or -g %d for %d ranks in this one process",
			ErrUsage, threads, threads, threads, threads, threads)
	}
	cfg.Backend = Backend(strings.ToLower(backend))
	return cfg, cfg.validate()
}

// TestName is the benchmark's name: the collective's or the
// point-to-point test's.
func (c *Config) TestName() string {
	if c.P2P != NoP2P {
		return c.P2P.String()
	}
	return c.Coll.String()
}

func (c *Config) rooted() bool {
	if c.P2P != NoP2P {
		return c.P2P.Rooted()
	}
	return c.Coll.Rooted()
}

func (c *Config) reduces() bool { return c.P2P == NoP2P && c.Coll.Reduces() }

func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	switch {
	case c.MinBytes > c.MaxBytes:
		return bad("invalid sizes for minbytes and maxbytes: %d > %d", c.MinBytes, c.MaxBytes)
	case c.StepFactor <= 1 && c.StepBytes <= 0 && c.MinBytes < c.MaxBytes:
		return bad("-i stepbytes must be > 0 when -f is 1")
	case c.StepFactor < 1:
		return bad("-f stepfactor %d must be >= 1", c.StepFactor)
	case c.Iters < 1:
		return bad("-n iters %d must be >= 1", c.Iters)
	case c.Warmup < 0:
		return bad("-w warmup_iters %d must be >= 0", c.Warmup)
	case c.Check < 0:
		return bad("-c check %d must be >= 0", c.Check)
	case c.Graph < 0:
		return bad("-G cudagraph %d must be >= 0", c.Graph)
	case c.Register < 0 || c.Register > 2:
		return bad("-R register %d must be 0, 1 or 2", c.Register)
	case c.Average < AvgRank0 || c.Average > AvgMax:
		return bad("-a average %d must be 0, 1, 2 or 3", c.Average)
	case c.GPUs < 1:
		return bad("-g ngpus %d must be >= 1", c.GPUs)
	case c.Backend != BackendAuto && c.Backend != BackendHost && c.Backend != BackendGPU:
		return bad("--backend %q must be host, gpu or auto", c.Backend)
	case c.Peer != "" && c.Plot == "":
		return bad("--peer needs --plot")
	}
	return c.CheckBackend(c.Backend)
}

// CheckBackend rejects the flags that backend b cannot serve: -G and -R
// need the gpu backend. ParseArgs checks the --backend given; the caller
// checks again once auto has chosen, before anything runs.
func (c *Config) CheckBackend(b Backend) error {
	if b != BackendHost {
		return nil
	}
	why := ""
	if c.Backend == BackendAuto {
		why = " (this job runs on the host backend)"
	}
	switch {
	case c.Graph > 0:
		return fmt.Errorf("%w: -G needs the gpu backend%s", ErrUsage, why)
	case c.Register > 0:
		return fmt.Errorf("%w: -R needs the gpu backend%s", ErrUsage, why)
	}
	return nil
}

func parseTypes(s string) ([]collectives.DataType, error) {
	if strings.EqualFold(s, "all") {
		return collectives.AllDataTypes(), nil
	}
	var out []collectives.DataType
	for _, f := range strings.Split(s, ",") {
		t, err := collectives.ParseDataType(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: -d: %w", ErrUsage, err)
		}
		out = append(out, t)
	}
	return out, nil
}

func parseOps(s string) ([]collectives.Op, error) {
	if strings.EqualFold(s, "all") {
		return collectives.AllOps(), nil
	}
	var out []collectives.Op
	for _, f := range strings.Split(s, ",") {
		o, err := collectives.ParseOp(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("%w: -o: %w", ErrUsage, err)
		}
		out = append(out, o)
	}
	return out, nil
}

// ParseSize reads nccl-tests' sizes (units.ParseSize).
func ParseSize(s string) (int64, error) { return units.ParseSize(s) }

// Sizes lists the swept sizes in bytes: from MinBytes to MaxBytes,
// multiplying by StepFactor when it is above 1, else adding StepBytes.
func (c *Config) Sizes() []int64 {
	var out []int64
	for s := c.MinBytes; s <= c.MaxBytes; {
		out = append(out, s)
		next := s + c.StepBytes
		if c.StepFactor > 1 {
			next = s * c.StepFactor
			if s == 0 {
				next = 1 // 0 would never grow
			}
		}
		if next <= s {
			break
		}
		s = next
	}
	return out
}

// notTaken are nccl-tests' flags goccl bench does not take, with what
// they do there, so that a user of nccl-tests learns why.
var notTaken = map[string]string{
	"m": "aggregated iterations", "agg_iters": "aggregated iterations",
	"N": "run cycles", "run_cycles": "run cycles",
	"p": "parallel init", "parallel_init": "parallel init",
	"y": "the NULL stream", "stream_null": "the NULL stream",
	"T": "a timeout", "timeout": "a timeout",
	"C": "CPU time reports", "report_cputime": "CPU time reports",
	"S": "timestamp reports", "report_timestamps": "timestamp reports",
	"J": "a JSON output file", "output_file": "a JSON output file",
}

// unknownFlag names an nccl-tests flag goccl bench lacks in err, the flag
// package's "flag provided but not defined: -X".
func unknownFlag(err error) error {
	const pre = "flag provided but not defined: "
	name, ok := strings.CutPrefix(err.Error(), pre)
	if !ok {
		return err
	}
	what, ok := notTaken[strings.TrimLeft(name, "-")]
	if !ok {
		return err
	}
	hint := ""
	switch strings.TrimLeft(name, "-") {
	case "T", "timeout":
		hint = "; goccl run --timeout or GOCCL_TIMEOUT bound the job and its calls"
	case "J", "output_file":
		hint = "; --json FILE writes the results"
	}
	return fmt.Errorf("%s (nccl-tests' %s) is not one of goccl bench's flags%s", name, what, hint)
}

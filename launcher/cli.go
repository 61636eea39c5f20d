package launcher

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Usage is the synopsis of `goccl run`.
const Usage = `usage: goccl run -np N [--tag-output] [--timeout D] [--grace D] prog [args...]

Starts N local ranks of prog with the torchrun variables (MASTER_ADDR,
MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), GOCCL_COMM_ID
and GOCCL_JOB_TOKEN. Exits with the first failing rank's status.

flags:
  -np, --np, -n N   number of ranks (required)
  --tag-output      prefix each output line with "[rank] "
  --timeout D       stop the job after D (e.g. 90s, 5m; a bare number is seconds)
  --grace D         time between SIGTERM and SIGKILL when stopping ranks (default 10s)
`

// durationFlag accepts Go durations and bare seconds.
type durationFlag struct{ d *time.Duration }

func (f durationFlag) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f durationFlag) Set(s string) error {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		*f.d = time.Duration(n * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (want e.g. 30s, 5m, or seconds)")
	}
	*f.d = d
	return nil
}

// ParseArgs reads `goccl run`'s command line (without "run") into a
// Config. Flags stop at the program name; everything after it belongs to
// the program. It returns flag.ErrHelp for -h.
func ParseArgs(args []string, usageOut io.Writer) (Config, error) {
	var cfg Config
	fs := flag.NewFlagSet("goccl run", flag.ContinueOnError)
	// The flag package would print its error and the usage itself; the
	// caller prints both once, prefixed, so the flag set stays silent.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	np := -1
	fs.IntVar(&np, "np", -1, "number of ranks")
	fs.IntVar(&np, "n", -1, "number of ranks")
	fs.BoolVar(&cfg.TagOutput, "tag-output", false, "tag output lines with the rank")
	fs.Var(durationFlag{&cfg.Timeout}, "timeout", "job time limit")
	fs.Var(durationFlag{&cfg.Grace}, "grace", "SIGTERM to SIGKILL delay")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(usageOut, Usage)
		}
		return cfg, err
	}
	if np == -1 {
		return cfg, fmt.Errorf("%w: -np N is required", ErrConfig)
	}
	cfg.NP = np
	rest := fs.Args()
	if len(rest) == 0 {
		return cfg, fmt.Errorf("%w: no program to run", ErrConfig)
	}
	cfg.Program, cfg.Args = rest[0], rest[1:]
	return cfg, nil
}

// logLevel maps GOCCL_DEBUG to a slog level; the launcher is quiet (WARN)
// unless asked.
func logLevel() slog.Level {
	switch strings.ToUpper(os.Getenv("GOCCL_DEBUG")) {
	case "INFO":
		return slog.LevelInfo
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// Main is `goccl run`: it parses args, runs the job with SIGINT, SIGTERM
// and SIGHUP forwarded to the ranks, reports how it ended on stderr, and
// returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	// Help is asked for, so it goes to stdout, as `goccl bench -h`'s and
	// `goccl info -h`'s; a usage error goes to stderr.
	cfg, err := ParseArgs(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "goccl run: %v\n%s", err, Usage)
		return ExitConfig
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	cfg.Stdout, cfg.Stderr = stdout, stderr
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel()}))

	res, err := Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintf(stderr, "goccl run: %v\n", err)
		for _, l := range res.Summary {
			fmt.Fprintf(stderr, "goccl run: flight recorder: %s\n", l)
		}
		if n := stoppedCount(res); n > 0 {
			other := ""
			if res.FirstFailed >= 0 {
				other = "other "
			}
			fmt.Fprintf(stderr, "goccl run: stopped %d %srank(s)\n", n, other)
		}
	}
	return res.ExitCode
}

func stoppedCount(res Result) int {
	n := 0
	for _, st := range res.Ranks {
		if st.Stopped {
			n++
		}
	}
	return n
}

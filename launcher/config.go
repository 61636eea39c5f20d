package launcher

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Defaults.
const (
	DefaultGrace = 10 * time.Second // SIGTERM to SIGKILL when Config.Grace is 0
	// MaxRanks bounds -np: one node's ranks, with room to spare.
	MaxRanks = 1024
)

// Config describes a job. Program and NP are required.
type Config struct {
	// NP is the number of ranks (1..MaxRanks).
	NP int
	// Program is run by every rank; looked up in PATH when it has no slash.
	Program string
	// Args follow the program name.
	Args []string
	// Env is the environment the contract is added to; nil means
	// os.Environ().
	Env []string
	// Dir is the ranks' working directory; empty means the current one.
	Dir string
	// TagOutput prefixes each output line with "[rank] ".
	TagOutput bool
	// Timeout stops the job when it runs longer; 0 means no limit.
	Timeout time.Duration
	// Grace is the time between SIGTERM and SIGKILL when the launcher stops
	// ranks; 0 means DefaultGrace.
	Grace time.Duration
	// Stdout and Stderr receive the ranks' output; nil means os.Stdout and
	// os.Stderr. Lines from different ranks are never mixed mid-line.
	Stdout, Stderr io.Writer
	// Signals, when non-nil, delivers signals to forward to every rank
	// (the CLI passes its signal.Notify channel).
	Signals <-chan os.Signal
	// Addr is the rendezvous host given to the ranks; empty means 127.0.0.1.
	Addr string
	// Port is the rendezvous port; 0 picks a free one.
	Port int
	// Logger receives the launcher's own events; nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.NP < 1 || out.NP > MaxRanks {
		return out, fmt.Errorf("%w: number of ranks %d not in [1,%d]", ErrConfig, out.NP, MaxRanks)
	}
	if out.Program == "" {
		return out, fmt.Errorf("%w: no program to run", ErrConfig)
	}
	if out.Timeout < 0 {
		return out, fmt.Errorf("%w: timeout %v is negative", ErrConfig, out.Timeout)
	}
	if out.Grace < 0 {
		return out, fmt.Errorf("%w: grace period %v is negative", ErrConfig, out.Grace)
	}
	if out.Port < 0 || out.Port > 65535 {
		return out, fmt.Errorf("%w: port %d not in [0,65535]", ErrConfig, out.Port)
	}
	if out.Dir != "" {
		if fi, err := os.Stat(out.Dir); err != nil || !fi.IsDir() {
			return out, fmt.Errorf("%w: working directory %q is not a directory", ErrConfig, out.Dir)
		}
	}
	if out.Grace == 0 {
		out.Grace = DefaultGrace
	}
	if out.Env == nil {
		out.Env = os.Environ()
	}
	if out.Stdout == nil {
		out.Stdout = os.Stdout
	}
	if out.Stderr == nil {
		out.Stderr = os.Stderr
	}
	if out.Addr == "" {
		out.Addr = "127.0.0.1"
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

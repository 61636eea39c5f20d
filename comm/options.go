package comm

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Backend names.
const (
	BackendAuto = "auto" // gpu when a CUDA driver loads and sees devices, else host
	BackendHost = "host" // CPU buffers over shared memory
	BackendGPU  = "gpu"  // GPU buffers, goccl's CUDA kernels
)

// Defaults.
const (
	DefaultTimeout           = 60 * time.Second // Options.Timeout when unset
	DefaultHeartbeatInterval = time.Second      // Options.HeartbeatInterval when unset
	// heartbeatMisses heartbeats missed in a row mean the peer is gone.
	heartbeatMisses = 5
)

// LevelTrace is GOCCL_DEBUG=TRACE's slog level.
const LevelTrace = slog.LevelDebug - 4

// NameTraceLevel is a slog.HandlerOptions.ReplaceAttr that writes
// LevelTrace as "TRACE", where slog would write "DEBUG-4". goccl's own
// loggers use it; an Options.Logger may too.
func NameTraceLevel(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok && l == LevelTrace {
			a.Value = slog.StringValue("TRACE")
		}
	}
	return a
}

// Options configure a communicator. The zero value means defaults; the
// GOCCL_* environment variables fill what is left unset.
type Options struct {
	// Backend: "auto" (default; GOCCL_BACKEND), "host" or "gpu". Auto
	// picks gpu when a CUDA driver loads and sees devices. All ranks must
	// end up with the same backend.
	Backend string
	// Device is the CUDA ordinal; nil means LocalRank % device count.
	Device *int
	// Timeout bounds init and bootstrap operations (GOCCL_TIMEOUT, a Go
	// duration such as "30s"; default 60 s).
	Timeout time.Duration
	// Transport and Algo are handed to the backend (GOCCL_TRANSPORT,
	// GOCCL_ALGO).
	Transport, Algo string
	// Check compares every collective's arguments across ranks before
	// running it (GOCCL_CHECK=1), and on the GPU backend that each buffer
	// lies inside one allocation of the driver's (cuMemGetAddressRange).
	// It costs a bootstrap round trip per call.
	Check bool
	// Logger receives goccl's logs; nil logs WARN and above to stderr
	// (GOCCL_DEBUG=WARN|INFO|TRACE sets the level).
	Logger *slog.Logger
	// HeartbeatInterval is the health path's beat (default 1 s); a peer
	// silent for 5 beats is declared failed.
	HeartbeatInterval time.Duration
	// NewBackend, when set, builds the backend instead of the host or GPU
	// one (tests, tools).
	NewBackend BackendFactory
	// Env replaces the process environment when not nil.
	Env map[string]string
}

// BackendConfig is what a BackendFactory gets.
type BackendConfig struct {
	Name      string // "host" or "gpu"
	Device    int    // -1 for the host backend unless set
	LocalRank int
	Transport string
	Algo      string
	Logger    *slog.Logger
	// Timeout bounds a collective's wait for a peer when the user set one
	// (Options.Timeout or GOCCL_TIMEOUT); 0 leaves the backend's default.
	Timeout time.Duration
	// Nodes names every rank's node (equal keys: one machine), as init
	// learned them; the host backend spans nodes with it.
	Nodes []string
	// Recorder is the flight recorder's ring size (0: off); the GPU
	// backend gives its kernels a timestamp table of that many calls.
	Recorder int
	// Check: GOCCL_CHECK (Options.Check) is on; the GPU backend verifies
	// its copy-engine point-to-point contract per call with it.
	Check bool
	// Env is the environment the settings come from (Options.Env, else
	// the process's), for a backend's own settings (GOCCL_HOST_CMA...).
	Env map[string]string
}

// BackendFactory builds one rank's backend; it is collective.
type BackendFactory func(ctx context.Context, b transport.Bootstrap, cfg BackendConfig) (collectives.Backend, error)

// Device returns a pointer to n, for Options.Device.
func Device(n int) *int { return &n }

// settings are Options with the environment and defaults applied.
type settings struct {
	backend    string
	device     *int
	timeout    time.Duration
	timeoutSet bool // by Options or GOCCL_TIMEOUT, not the default
	transport  string
	algo       string
	check      bool
	log        *slog.Logger
	hbInterval time.Duration
	factory    BackendFactory
	hostID     string            // GOCCL_HOSTID: names this rank's node in place of hostname and boot id
	ifIP       netip.Addr        // GOCCL_SOCKET_IFNAME's interface address; invalid when unset
	rec        recorderSettings  // GOCCL_RECORDER_*, GOCCL_METRICS_ADDR (record.go)
	env        map[string]string // what the settings were read from, for the backend's own (BackendConfig.Env)
}

func (o *Options) env() map[string]string {
	if o.Env != nil {
		return o.Env
	}
	return environ()
}

// resolve applies env and defaults; errors name the variable at fault.
func (o *Options) resolve(env map[string]string) (settings, error) {
	s := settings{backend: o.Backend, device: o.Device, timeout: o.Timeout, transport: o.Transport,
		algo: o.Algo, check: o.Check, log: o.Logger, hbInterval: o.HeartbeatInterval, factory: o.NewBackend}
	s.hostID, s.env = env["GOCCL_HOSTID"], env
	if v := env[ifnameVar]; strings.TrimSpace(v) != "" {
		// Checked here, so that a setting that matches nothing fails
		// before this rank meets any other.
		var err error
		if s.ifIP, err = listenIP(v, netip.Addr{}); err != nil {
			return s, err
		}
	}
	if s.backend == "" {
		s.backend = strings.ToLower(env["GOCCL_BACKEND"])
		if s.backend == "" {
			s.backend = BackendAuto
		}
		if err := checkBackend(s.backend); err != nil {
			return s, envErr("GOCCL_BACKEND", env["GOCCL_BACKEND"], err.Error())
		}
	} else if err := checkBackend(s.backend); err != nil {
		return s, fmt.Errorf("%w: Options.Backend=%q: %v", collectives.ErrInvalidArgument, o.Backend, err)
	}
	if s.device != nil && *s.device < 0 {
		return s, fmt.Errorf("%w: Options.Device=%d", collectives.ErrInvalidArgument, *s.device)
	}
	if s.timeout < 0 {
		return s, fmt.Errorf("%w: Options.Timeout=%v", collectives.ErrInvalidArgument, s.timeout)
	}
	s.timeoutSet = s.timeout != 0 || env["GOCCL_TIMEOUT"] != ""
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
		if v := env["GOCCL_TIMEOUT"]; v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				// Plain numbers are seconds, as NCCL's timeouts.
				n, nerr := strconv.Atoi(v)
				if nerr != nil {
					return s, envErr("GOCCL_TIMEOUT", v, "want a duration such as 30s")
				}
				d = time.Duration(n) * time.Second
			}
			if d <= 0 {
				return s, envErr("GOCCL_TIMEOUT", v, "must be positive")
			}
			s.timeout = d
		}
	}
	if s.transport == "" {
		s.transport = env["GOCCL_TRANSPORT"]
	}
	if s.algo == "" {
		s.algo = env["GOCCL_ALGO"]
	}
	if !s.check {
		switch v := env["GOCCL_CHECK"]; v {
		case "", "0":
		case "1":
			s.check = true
		default:
			return s, envErr("GOCCL_CHECK", v, "want 0 or 1")
		}
	}
	if s.hbInterval < 0 {
		return s, fmt.Errorf("%w: Options.HeartbeatInterval=%v", collectives.ErrInvalidArgument, s.hbInterval)
	}
	if s.hbInterval == 0 {
		s.hbInterval = DefaultHeartbeatInterval
	}
	if s.log == nil {
		lvl := slog.LevelWarn
		switch v := strings.ToUpper(env["GOCCL_DEBUG"]); v {
		case "", "WARN", "VERSION":
		case "INFO":
			lvl = slog.LevelInfo
		case "TRACE", "DEBUG":
			lvl = LevelTrace
		default:
			return s, envErr("GOCCL_DEBUG", env["GOCCL_DEBUG"], "want WARN, INFO or TRACE")
		}
		s.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl, ReplaceAttr: NameTraceLevel}))
	}
	return s, nil
}

func checkBackend(b string) error {
	switch b {
	case BackendAuto, BackendHost, BackendGPU:
		return nil
	}
	return fmt.Errorf("want auto, host or gpu")
}

package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goccl/goccl/recorder"
)

// The process's live communicators with a recorder: SIGUSR1 makes each
// write its record (to GOCCL_RECORDER_DIR, else to stderr) without
// stopping anything, and GOCCL_METRICS_ADDR serves their statistics to
// Prometheus.

var live struct {
	mu      sync.Mutex
	comms   map[*Comm]struct{}
	sigs    chan os.Signal
	srv     *http.Server
	srvAddr string
	// closed keeps the last records of communicators closed in this
	// process (maxClosedRecords at most, newest last), for their peers
	// here that still wait for them.
	closed []*recorder.Record
}

const maxClosedRecords = 64

// closedRecords are the kept records of closed ranks of communicator id.
func closedRecords(id string, size int) []*recorder.Record {
	live.mu.Lock()
	defer live.mu.Unlock()
	var out []*recorder.Record
	for _, r := range live.closed {
		if r.Comm == id && r.Size == size && r.Rank >= 0 && r.Rank < size {
			out = append(out, r)
		}
	}
	return out
}

func register(c *Comm) {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.comms == nil {
		live.comms = map[*Comm]struct{}{}
	}
	live.comms[c] = struct{}{}
	if live.sigs == nil && c.obs.set.signal {
		live.sigs = make(chan os.Signal, 1)
		signal.Notify(live.sigs, syscall.SIGUSR1)
		go dumpOnSignal(live.sigs)
	}
	if c.obs.set.metricsAddr != "" && live.srv == nil {
		if err := startMetrics(c); err != nil {
			c.log.Warn("goccl: metrics endpoint", "rank", c.rank, "addr", c.obs.set.metricsAddr, "err", err)
		} else {
			// The port may be the system's choice (port 0) or offset by
			// the local rank: say where to scrape.
			c.log.Info("goccl: metrics endpoint", "rank", c.rank, "url", "http://"+live.srvAddr+"/metrics")
		}
	}
}

func unregister(c *Comm, last *recorder.Record) {
	live.mu.Lock()
	defer live.mu.Unlock()
	delete(live.comms, c)
	if len(live.closed) == maxClosedRecords {
		live.closed = append(live.closed[:0], live.closed[1:]...)
	}
	live.closed = append(live.closed, last)
	if len(live.comms) > 0 {
		return
	}
	disconnectLauncher()
	if live.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = live.srv.Shutdown(ctx)
		cancel()
		live.srv, live.srvAddr = nil, ""
	}
	// SIGUSR1 stays caught (and ignored while no communicator is live): a
	// launcher's late request must not kill a rank that is closing.
}

func liveComms() []*Comm {
	live.mu.Lock()
	defer live.mu.Unlock()
	out := make([]*Comm, 0, len(live.comms))
	for c := range live.comms {
		out = append(out, c)
	}
	return out
}

func dumpOnSignal(sigs <-chan os.Signal) {
	for range sigs {
		for _, c := range liveComms() {
			c.dump()
		}
	}
}

// dump writes c's record where SIGUSR1 sends it.
func (c *Comm) dump() {
	if c.obs.set.dir != "" {
		path, err := c.writeRecord(c.obs.set.dir, "dump", nil)
		if err != nil {
			c.log.Warn("goccl: flight recorder", "rank", c.rank, "err", err)
			return
		}
		c.log.Info("goccl: flight recorder written", "rank", c.rank, "path", path)
		return
	}
	rec := c.snapshot()
	rec.Reason, rec.Written = "dump", time.Now().UnixNano()
	b, err := rec.JSON()
	if err == nil {
		_, _ = os.Stderr.Write(append(b, '\n'))
	}
}

// MetricsAddr is where this process serves its metrics ("" when it does
// not): GOCCL_METRICS_ADDR, whose port is offset by the local rank of the
// first communicator so that the ranks of a node do not collide.
func MetricsAddr() string {
	live.mu.Lock()
	defer live.mu.Unlock()
	return live.srvAddr
}

// commSource is a communicator as the collector reads it.
type commSource struct{ c *Comm }

func (s commSource) Stats() []recorder.Stat { return s.c.Stats() }
func (s commSource) Meta() recorder.Meta    { return s.c.recMeta() }

func startMetrics(c *Comm) error {
	host, port, err := net.SplitHostPort(c.obs.set.metricsAddr)
	if err != nil {
		return fmt.Errorf("GOCCL_METRICS_ADDR=%q: %w", c.obs.set.metricsAddr, err)
	}
	if p, err := strconv.Atoi(port); err == nil && p != 0 {
		port = strconv.Itoa(p + c.localRank)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(recorder.NewCollector(func() []recorder.Source {
		cs := liveComms()
		out := make([]recorder.Source, len(cs))
		for i, c := range cs {
			out[i] = commSource{c}
		}
		return out
	}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	live.srv, live.srvAddr = srv, ln.Addr().String()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Warn("goccl: metrics endpoint stopped", "err", err)
		}
	}()
	return nil
}

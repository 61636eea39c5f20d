package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/recorder"
)

// The glue between a communicator and its flight recorder (package
// recorder): the settings, the record written when the communicator
// aborts, the line that names the rank a failed call waited for, and
// Record and Stats.

// recorderSettings are the GOCCL_RECORDER_* and GOCCL_METRICS_ADDR
// variables.
type recorderSettings struct {
	size        int
	dir         string // GOCCL_RECORDER_DIR; "" unset
	signal      bool   // SIGUSR1 dumps: GOCCL_RECORDER_SIGNAL, default on where dir is set
	metricsAddr string
	sock, token string // the launcher's socket and the job's token (record_launcher.go)
	jobRank     string // RANK, as the launcher gave it
}

func parseRecorderEnv(env map[string]string) (recorderSettings, error) {
	s := recorderSettings{size: recorder.DefaultSize, dir: env["GOCCL_RECORDER_DIR"], metricsAddr: env["GOCCL_METRICS_ADDR"],
		sock: env[EnvRecorderSock], token: env["GOCCL_JOB_TOKEN"], jobRank: env["RANK"]}
	if v := env["GOCCL_RECORDER_SIZE"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxRecorderSize {
			return s, envErr("GOCCL_RECORDER_SIZE", v, fmt.Sprintf("want a number of calls up to %d, 0 to turn the recorder off", maxRecorderSize))
		}
		s.size = n
	}
	// A library that takes SIGUSR1 would take it from applications that
	// use it; so only where asked, or where the records have a place to go.
	s.signal = s.dir != ""
	switch v := env["GOCCL_RECORDER_SIGNAL"]; v {
	case "":
	case "0":
		s.signal = false
	case "1":
		s.signal = true
	default:
		return s, envErr("GOCCL_RECORDER_SIGNAL", v, "want 0 or 1")
	}
	return s, nil
}

// observer is a communicator's recorder state beyond the ring.
type observer struct {
	set     recorderSettings
	comm    string
	teller  collectives.PathTeller // the backend, where it says how it carried a call
	gpu     bool                   // the link ceiling is that of the communicator's GPUs (linkceil.go)
	link    sync.Once              // the ceiling is looked up on the first Stats
	aborted atomic.Bool            // the abort's record was written
	mu      sync.Mutex             // one file write at a time
}

// maxRecorderSize bounds the ring (112 bytes a call).
const maxRecorderSize = 1 << 20

// recorderWait bounds how long a failed call waits for the other ranks'
// records before it names the straggler from those it has. The wait ends
// sooner when no missing record can come (recordMayCome); a live rank's
// takes two hops through rank 0, slow only on a machine short of CPU.
const recorderWait = 3 * time.Second

// recorderGather is how many recent calls each rank sends when the ranks
// exchange records over the bootstrap.
const recorderGather = 16

// startRecorder gives c its ring, before the bootstrap may report a
// failure to c.
func (c *Comm) startRecorder(s settings) {
	set := s.rec
	if set.size == 0 {
		return
	}
	id := fmt.Sprintf("%016x", c.boot.magic)
	host, _ := os.Hostname()
	c.rec = recorder.New(recorder.Config{Size: set.size, Async: c.backendName == BackendGPU, Meta: recorder.Meta{
		Comm: id, Rank: c.rank, Size: c.size, PID: os.Getpid(), Host: host, Backend: c.backendName,
		Algo: s.algo, Transport: s.transport,
	}})
	c.obs = &observer{set: set, comm: id, gpu: c.backendName == BackendGPU}
	c.obs.teller, _ = c.backend.(collectives.PathTeller)
}

// endRecord records the end of call id and the path the backend took.
func (c *Comm) endRecord(id uint64, err error) {
	if c.rec == nil {
		return
	}
	var p collectives.Path
	if c.obs.teller != nil {
		p = c.obs.teller.LastPath()
	}
	c.rec.EndPath(id, err, p)
}

// registerRecorder registers a communicator that has formed for SIGUSR1
// dumps and metrics.
func (c *Comm) registerRecorder() {
	if c.rec == nil {
		return
	}
	register(c)
	connectLauncher(c)
}

// Record returns a copy of this rank's flight recorder: its last calls
// (GOCCL_RECORDER_SIZE, default 2000), oldest first. Empty when the
// recorder is off.
func (c *Comm) Record() recorder.Record {
	return c.snapshot()
}

// Stats returns this rank's statistics per call kind and size class of
// the calls that finished (host backend; GPU calls once their device
// times are known).
func (c *Comm) Stats() []recorder.Stat {
	if c.rec == nil {
		return nil
	}
	c.obs.link.Do(func() {
		if c.obs.gpu {
			c.rec.SetLink(c.linkCeiling())
		} else {
			c.rec.SetLink(c.netCeiling())
		}
	})
	c.resolve()
	return c.rec.Stats()
}

// recMeta is what the records say about this communicator.
func (c *Comm) recMeta() recorder.Meta { return c.rec.Meta() }

// resolve gives enqueued calls the times the device recorded, where the
// backend keeps them.
func (c *Comm) resolve() {
	if dc, ok := c.backend.(recorder.DeviceClock); ok {
		c.rec.Resolve(dc)
	}
}

func (c *Comm) snapshot() recorder.Record {
	c.resolve()
	return c.rec.Snapshot()
}

// writeRecord writes the ring to dir with reason.
func (c *Comm) writeRecord(dir, reason string, cause error) (string, error) {
	rec := c.snapshot()
	rec.Reason = reason
	if cause != nil {
		rec.Error = cause.Error()
	}
	c.obs.mu.Lock()
	defer c.obs.mu.Unlock()
	return recorder.WriteFile(dir, &rec)
}

// recordAbort shares this rank's record once, when the communicator
// aborts, over the bootstrap and in the recorder directory, so that the
// others (and the launcher) can read what it was doing, the files also
// when the bootstrap is gone.
func (c *Comm) recordAbort(cause error) {
	if c.rec == nil || c.obs.aborted.Swap(true) {
		return
	}
	c.shareRecord("abort", cause)
	if c.obs.set.dir == "" {
		return
	}
	if _, err := c.writeRecord(c.obs.set.dir, "abort", cause); err != nil {
		c.log.Warn("goccl: flight recorder", "rank", c.rank, "err", err)
	}
}

// shareRecord sends this rank's last calls to every rank over the
// bootstrap (bootrecord.go) and to the launcher (record_launcher.go),
// with reason.
func (c *Comm) shareRecord(reason string, cause error) {
	b := c.compactRecord(reason, cause)
	if b == nil {
		return
	}
	c.boot.shareRecord(b)
	reportLauncher(b)
}

// compactRecord is this rank's last calls as the ranks exchange them
// (JSON), with reason; nil when it cannot be encoded.
func (c *Comm) compactRecord(reason string, cause error) []byte {
	c.resolve()
	rec := c.rec.SnapshotLast(recorderGather)
	rec.Reason, rec.Written = reason, time.Now().UnixNano()
	if cause != nil {
		rec.Error = cause.Error()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil
	}
	return b
}

// explained is a failure with the recorder's line added; it unwraps to
// the failure.
type explained struct {
	err  error
	line string
}

func (e *explained) Error() string { return e.err.Error() + "; flight recorder: " + e.line }
func (e *explained) Unwrap() error { return e.err }

// explainFailure adds to a failed call's error (ret, from orig) the line
// that says which rank the job waits for, and logs it.
func (c *Comm) explainFailure(ctx context.Context, orig, ret error) error {
	if c.rec == nil || ret == nil {
		return ret
	}
	var line string
	switch {
	case errors.Is(ret, collectives.ErrAborted) || errors.Is(ret, collectives.ErrTimeout):
		line = c.explainAbort(ctx, ret)
	case isCallMismatch(orig):
		line = c.explainMismatch(ctx)
		// For the launcher: the communicator lives on, so nothing else
		// sends or writes the record.
		reportLauncher(c.compactRecord("error", orig))
		if dir := c.obs.set.dir; dir != "" {
			if _, err := c.writeRecord(dir, "error", orig); err != nil {
				c.log.Warn("goccl: flight recorder", "rank", c.rank, "err", err)
			}
		}
	}
	if line == "" {
		return ret
	}
	c.log.Error("goccl: flight recorder", "rank", c.rank, "summary", line)
	e := &explained{err: ret, line: line}
	if c.abortErr.Load() != nil {
		c.explainedAbort.CompareAndSwap(nil, e)
	}
	return e
}

// isCallMismatch reports whether every rank failed the call for meeting
// ranks in other calls; the host backend reports it in words.
func isCallMismatch(err error) bool {
	return errors.Is(err, collectives.ErrCallMismatch) || strings.Contains(err.Error(), "mismatched collective calls")
}

// explainAbort takes the records of the ranks in this process from their
// rings, and the others' as they come over the bootstrap, where each rank
// shares its own when the communicator aborts or closes, or else from the
// recorder directory, where each also writes it; waiting a little for
// those not there yet.
func (c *Comm) explainAbort(ctx context.Context, cause error) string {
	c.recordAbort(cause)
	recs := make([]*recorder.Record, c.size)
	for _, rec := range closedRecords(c.obs.comm, c.size) {
		recs[rec.Rank] = rec
	}
	for _, p := range liveComms() {
		if p.obs.comm == c.obs.comm && p.rank < c.size && p.size == c.size {
			rec := p.snapshot()
			rec.Reason = "abort"
			recs[p.rank] = &rec
		}
	}
	own := c.snapshot()
	recs[c.rank] = &own
	dir := c.obs.set.dir
	deadline := time.NewTimer(recorderWait)
	defer deadline.Stop()
	seen := make([][]byte, c.size) // the bootstrap's records already parsed
	may := make([]bool, c.size)
	for {
		// Whether a record may still come, read before the records: one
		// that came is kept before its rank is marked gone, so a rank
		// read as gone here has its record, if any, in shared.
		for r := range may {
			may[r] = r != c.rank && c.boot.recordMayCome(r)
		}
		shared, more := c.boot.peerRecords()
		missing := 0
		for r := range recs {
			if r == c.rank || finalRecord(recs[r]) {
				continue
			}
			if b := shared[r]; len(b) > 0 && (len(seen[r]) == 0 || &b[0] != &seen[r][0]) {
				seen[r] = b
				var rec recorder.Record
				if json.Unmarshal(b, &rec) == nil && rec.Rank == r && rec.Comm == c.obs.comm {
					recs[r] = &rec
				}
			}
			if dir != "" && !finalRecord(recs[r]) {
				if rec, err := recorder.ReadFile(filepath.Join(dir, recorder.FileName(r, c.obs.comm))); err == nil {
					recs[r] = rec
				}
			}
			if !finalRecord(recs[r]) && may[r] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		select {
		case <-more:
		case <-time.After(20 * time.Millisecond): // the files have no signal
		case <-deadline.C:
			return c.explainWith(recs, dir)
		case <-ctx.Done():
			return c.explainWith(recs, dir)
		}
	}
	return c.explainWith(recs, dir)
}

func (c *Comm) explainWith(recs []*recorder.Record, dir string) string {
	if dir == "" {
		return recorder.ExplainWhy(c.size, recs, time.Now(), "none came over the bootstrap, and GOCCL_RECORDER_DIR is unset")
	}
	return recorder.Explain(c.size, recs, time.Now())
}

// explainMismatch exchanges the ranks' last calls over the bootstrap:
// every rank failed the same call, so every rank is here.
func (c *Comm) explainMismatch(ctx context.Context) string {
	own := c.snapshot()
	if len(own.Calls) > recorderGather {
		own.Calls = own.Calls[len(own.Calls)-recorderGather:]
	}
	b, err := json.Marshal(own)
	if err != nil {
		return ""
	}
	gctx, cancel := context.WithTimeout(ctx, recorderWait)
	defer cancel()
	all, err := c.boot.AllGather(gctx, b)
	if err != nil {
		c.log.Warn("goccl: flight recorder: exchanging records", "rank", c.rank, "err", err)
		return ""
	}
	recs := make([]*recorder.Record, c.size)
	for r, x := range all {
		var rec recorder.Record
		if json.Unmarshal(x, &rec) == nil {
			recs[r] = &rec
		}
	}
	return recorder.Explain(c.size, recs, time.Now())
}

// stopRecorder unregisters c, keeping its last calls for the ranks of
// this process that may still wait for it, and shares them with the
// other processes' (over the bootstrap, and in the recorder directory);
// called by Close, before its goodbye.
func (c *Comm) stopRecorder() {
	if c.rec == nil {
		return
	}
	c.resolve()
	rec := c.rec.SnapshotLast(recorderGather)
	rec.Reason = "close"
	if c.obs.aborted.Load() {
		rec.Reason = "abort" // shared when it aborted
	} else {
		c.shareRecord("close", nil)
		if dir := c.obs.set.dir; dir != "" {
			if _, err := c.writeRecord(dir, "close", nil); err != nil {
				c.log.Debug("goccl: flight recorder", "rank", c.rank, "err", err)
			}
		}
	}
	unregister(c, &rec)
}

// finalRecord reports whether rec is what its rank wrote last: it
// aborted or closed, and writes no other.
func finalRecord(rec *recorder.Record) bool {
	return rec != nil && (rec.Reason == "abort" || rec.Reason == "close")
}

package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/recorder"
)

// drainWait bounds how long output is read after the last rank exited (a
// grandchild that escaped the rank's process group may hold the pipe).
const drainWait = 2 * time.Second

// rankProc is one started rank.
type rankProc struct {
	rank  int
	cmd   *exec.Cmd
	start time.Time

	mu     sync.Mutex // guards exited against signalling a reaped pid
	exited bool
}

// signal sends sig to the rank's process group unless it has been reaped.
func (p *rankProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.exited {
		_ = signalGroup(p.cmd.Process.Pid, sig)
	}
}

type exitEvent struct {
	rank int
	st   RankStatus
}

// wait reaps the rank, kills what is left of its process group, and
// reports its status.
func (p *rankProc) wait(events chan<- exitEvent) {
	_ = p.cmd.Wait() // the status is in ProcessState
	st := RankStatus{Rank: p.rank, Pid: p.cmd.Process.Pid, Exited: true, Duration: time.Since(p.start)}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		st.ExitCode, st.Signal = -1, ws.Signal()
	} else {
		st.ExitCode = p.cmd.ProcessState.ExitCode()
	}
	p.mu.Lock()
	// The rank is gone; its children (say, the binary `go run` started)
	// must not outlive it. The pid cannot have been reused in between.
	_ = signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	p.exited = true
	p.mu.Unlock()
	events <- exitEvent{p.rank, st}
}

// outputs holds the pipes of one job and the goroutines draining them.
type outputs struct {
	wg    sync.WaitGroup
	reads []*os.File
}

// attach gives cmd its stdout and stderr: the destination itself when it
// is a file and no tag is wanted, else a pipe drained line by line.
func (o *outputs) attach(cmd *exec.Cmd, rank int, cfg *Config, out, errs *sink) (closeAfterStart []*os.File, err error) {
	var tag []byte
	if cfg.TagOutput {
		tag = rankTag(rank)
	}
	for i, s := range []*sink{out, errs} {
		if f, ok := s.w.(*os.File); ok && !cfg.TagOutput {
			if i == 0 {
				cmd.Stdout = f
			} else {
				cmd.Stderr = f
			}
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			return closeAfterStart, fmt.Errorf("output pipe for rank %d: %w", rank, err)
		}
		o.reads = append(o.reads, r)
		closeAfterStart = append(closeAfterStart, w)
		if i == 0 {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
		o.wg.Add(1)
		go func(s *sink) {
			defer o.wg.Done()
			pump(r, s, tag)
		}(s)
	}
	return closeAfterStart, nil
}

// drain waits for the pumps, at most d, then closes the pipes.
func (o *outputs) drain(d time.Duration) {
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		for _, r := range o.reads {
			_ = r.Close()
		}
		<-done
	}
	for _, r := range o.reads {
		_ = r.Close()
	}
}

// Run starts cfg.NP ranks of cfg.Program and waits for all of them. It
// returns an error wrapping ErrConfig or ErrStart when the job could not
// start (nothing is left running), a *RankError (ErrRankFailed) naming
// the first rank that failed, or ErrTimeout / ErrCanceled when the job was
// stopped. Result is filled in every case where ranks were started.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{FirstFailed: -1}
	c, err := cfg.withDefaults()
	if err != nil {
		res.ExitCode = ExitConfig
		return res, err
	}
	if err := ctx.Err(); err != nil {
		res.ExitCode = ExitInternal
		return res, fmt.Errorf("%w before start: %w", ErrCanceled, err)
	}
	path, err := exec.LookPath(c.Program)
	if err != nil {
		res.ExitCode = ExitConfig
		return res, fmt.Errorf("%w: program %q: %w", ErrConfig, c.Program, lookPathCause(err))
	}
	if res.Token, err = NewToken(); err != nil {
		res.ExitCode = ExitInternal
		return res, fmt.Errorf("%w: %w", ErrStart, err)
	}
	res.Port = c.Port
	if res.Port == 0 {
		if res.Port, err = FreePort(c.Addr); err != nil {
			res.ExitCode = ExitInternal
			return res, fmt.Errorf("%w: %w", ErrStart, err)
		}
	}
	res.Ranks = make([]RankStatus, c.NP)
	for i := range res.Ranks {
		res.Ranks[i] = RankStatus{Rank: i, ExitCode: -1}
	}

	start := time.Now()
	recDir, cleanRec := recorderDir(&c, res.Token)
	defer cleanRec()
	recs := listenRecords(res.Token)
	if recs != nil {
		defer recs.finish(0)
		c.Env = append(append([]string(nil), c.Env...), EnvRecorderSock+"="+recs.addr())
	}
	out, errs := &sink{w: c.Stdout}, &sink{w: c.Stderr}
	var o outputs
	events := make(chan exitEvent, c.NP)
	procs, jobDone, err := startRanks(&c, path, &res, &o, out, errs, events)
	defer close(jobDone)
	if err != nil {
		// Kill what started, reap it, and report the start failure.
		for _, p := range procs {
			p.signal(syscall.SIGKILL)
		}
		for range procs {
			ev := <-events
			res.Ranks[ev.rank] = ev.st
		}
		o.drain(drainWait)
		res.ExitCode = ExitInternal
		return res, err
	}
	c.Logger.Info("goccl run: job started", "np", c.NP, "program", path, "port", res.Port)

	jr := jobRun{cfg: &c, procs: procs, res: &res, recDir: recDir, sink: recs}
	jr.loop(ctx, events)
	o.drain(drainWait)
	if res.FirstFailed >= 0 || res.TimedOut {
		var sent map[string][]*recorder.Record
		if recs != nil {
			recs.finish(drainWait)
			sent = recs.records()
		}
		res.Summary = summarize(sent, recDir, start, c.NP, jr.fates())
	}
	return res, jr.result()
}

// startRanks starts every rank from one locked OS thread that stays alive
// until jobDone is closed: a rank's parent-death signal fires when the
// thread that forked it exits, and Go may end the thread of a goroutine
// that dies while locked to it.
func startRanks(c *Config, path string, res *Result, o *outputs, out, errs *sink, events chan exitEvent) ([]*rankProc, chan struct{}, error) {
	jobDone := make(chan struct{})
	type started struct {
		procs []*rankProc
		err   error
	}
	ready := make(chan started)
	go func() {
		runtime.LockOSThread()
		var s started
		for r := 0; r < c.NP; r++ {
			p, err := startRank(c, path, r, res, o, out, errs)
			if err != nil {
				s.err = err
				break
			}
			s.procs = append(s.procs, p)
			go p.wait(events)
		}
		ready <- s
		<-jobDone
		runtime.UnlockOSThread()
	}()
	s := <-ready
	return s.procs, jobDone, s.err
}

// startFault, when set (tests only), makes the start of a rank fail.
var startFault func(rank int) error

func startRank(c *Config, path string, r int, res *Result, o *outputs, out, errs *sink) (*rankProc, error) {
	if startFault != nil {
		if err := startFault(r); err != nil {
			return nil, fmt.Errorf("%w %d: %w", ErrStart, r, err)
		}
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{c.Program}, c.Args...),
		Env:         RankEnv(c.Env, c.Addr, res.Port, r, c.NP, res.Token),
		Dir:         c.Dir,
		SysProcAttr: procAttr(),
	}
	closeAfter, err := o.attach(cmd, r, c, out, errs)
	defer func() {
		for _, f := range closeAfter {
			_ = f.Close()
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("%w %d: %w", ErrStart, r, err)
	}
	p := &rankProc{rank: r, cmd: cmd, start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w %d: %w", ErrStart, r, err)
	}
	res.Ranks[r].Pid = cmd.Process.Pid
	return p, nil
}

// jobRun is the state of a running job's event loop.
type jobRun struct {
	cfg   *Config
	procs []*rankProc
	res   *Result

	live      int
	order     []int // ranks in the order they were reaped
	firstFail int   // the first failed rank reaped, -1 while none
	killed    bool  // the grace period ran out and SIGKILL was sent
	stopping  bool  // the launcher is tearing the job down
	forwarded bool  // a signal was forwarded: every rank has it already
	hung      []int // ranks still running when the timeout fired
	canceled  error
	graceC    <-chan time.Time
	graceTime *time.Timer
	recDir    string      // the ranks' recorder directory (recorder.go)
	sink      *recordSink // the ranks' records over the socket, nil none (recsock.go)
}

func (j *jobRun) loop(ctx context.Context, events <-chan exitEvent) {
	j.live = len(j.procs)
	j.firstFail = -1
	defer j.pickFailed()
	var timeoutC <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	defer func() {
		if j.graceTime != nil {
			j.graceTime.Stop()
		}
	}()
	done := ctx.Done()
	for j.live > 0 {
		select {
		case ev := <-events:
			j.live--
			ev.st.Stopped = j.res.Ranks[ev.rank].Stopped
			ev.st.Frozen = j.res.Ranks[ev.rank].Frozen
			j.res.Ranks[ev.rank] = ev.st
			j.order = append(j.order, ev.rank)
			if ev.st.Failed() && j.firstFail < 0 && !j.stopping {
				j.firstFail = ev.rank
				j.findFrozen()
				// After a forwarded signal the others are already ending on
				// it (within the grace period armed then): a SIGTERM now
				// would race the signal they were sent.
				if !j.forwarded {
					j.cfg.Logger.Info("goccl run: rank failed; stopping the job", "rank", ev.rank, "status", ev.st.Describe())
					j.stop()
				}
			}
		case sig := <-j.cfg.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				continue
			}
			j.cfg.Logger.Info("goccl run: forwarding signal", "signal", s)
			j.forwarded = true
			for _, p := range j.procs {
				p.signal(s)
			}
			j.armGrace()
		case <-timeoutC:
			j.res.TimedOut = true
			j.findFrozen()
			for _, p := range j.procs {
				if !j.res.Ranks[p.rank].Exited {
					j.hung = append(j.hung, p.rank)
				}
			}
			j.cfg.Logger.Info("goccl run: timeout; stopping the job", "timeout", j.cfg.Timeout)
			j.stop()
		case <-done:
			done = nil
			j.canceled = ctx.Err()
			j.stop()
		case <-j.graceC:
			j.graceC = nil
			j.killed = true
			for _, p := range j.procs {
				p.signal(syscall.SIGKILL)
			}
		}
	}
}

// pickFailed names the rank that failed first. Survivors of a killed rank
// may exit (non-zero) before the killed one is reaped, so a rank that died
// of a signal the launcher did not send outranks the first rank reaped.
func (j *jobRun) pickFailed() {
	if j.firstFail < 0 {
		return
	}
	j.res.FirstFailed = j.firstFail
	for _, r := range j.order {
		st := j.res.Ranks[r]
		ours := st.Stopped && (st.Signal == syscall.SIGTERM || (st.Signal == syscall.SIGKILL && j.killed))
		if st.Failed() && st.Signal != 0 && !ours {
			j.res.FirstFailed = r
			return
		}
	}
	// A rank found stopped when the first failure came is what its peers
	// failed on (their errors name it), not the survivor reaped first.
	for _, st := range j.res.Ranks {
		if st.Frozen {
			j.res.FirstFailed = st.Rank
			return
		}
	}
}

// findFrozen marks the live ranks that are stopped by a signal now.
func (j *jobRun) findFrozen() {
	for _, p := range j.procs {
		st := &j.res.Ranks[p.rank]
		if !st.Exited && processStopped(p.cmd.Process.Pid) {
			st.Frozen = true
			j.cfg.Logger.Info("goccl run: rank is stopped (not running)", "rank", p.rank, "pid", p.cmd.Process.Pid)
		}
	}
}

// stop sends SIGTERM to every live rank and SIGKILL after the grace period.
func (j *jobRun) stop() {
	if j.stopping {
		return
	}
	j.stopping = true
	j.askDumps()
	for _, p := range j.procs {
		if !j.res.Ranks[p.rank].Exited {
			j.res.Ranks[p.rank].Stopped = true
			p.signal(syscall.SIGTERM)
		}
	}
	j.armGrace()
}

func (j *jobRun) armGrace() {
	if j.graceTime == nil {
		j.graceTime = time.NewTimer(j.cfg.Grace)
		j.graceC = j.graceTime.C
	}
}

// result fills ExitCode and returns the job's error.
func (j *jobRun) result() error {
	r := j.res
	switch {
	case r.FirstFailed >= 0:
		st := r.Ranks[r.FirstFailed]
		r.ExitCode = st.Code()
		return &RankError{Status: st}
	case r.TimedOut:
		r.ExitCode = ExitTimeout
		var frozen []int
		for _, h := range j.hung {
			if r.Ranks[h].Frozen {
				frozen = append(frozen, h)
			}
		}
		if len(frozen) > 0 {
			return fmt.Errorf("%w after %v; ranks still running: %s (stopped, not running: %s)", ErrTimeout, j.cfg.Timeout, rankList(j.hung), rankList(frozen))
		}
		return fmt.Errorf("%w after %v; ranks still running: %s", ErrTimeout, j.cfg.Timeout, rankList(j.hung))
	case j.canceled != nil:
		r.ExitCode = ExitInternal
		return fmt.Errorf("%w: %w", ErrCanceled, j.canceled)
	}
	r.ExitCode = 0
	return nil
}

// rankList formats ranks as "0,2,3".
func rankList(ranks []int) string {
	var b strings.Builder
	for i, r := range ranks {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

// lookPathCause is what exec.LookPath's error says beyond the program's
// name, which the launcher's message already gives: "executable file not
// found in $PATH", "permission denied", "no such file or directory".
func lookPathCause(err error) error {
	var ee *exec.Error
	if !errors.As(err, &ee) {
		return err
	}
	var pe *fs.PathError
	if errors.As(ee.Err, &pe) {
		return pe.Err
	}
	return ee.Err
}

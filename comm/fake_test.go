package comm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// fakeBackend records calls. When block is set, Run waits for Abort (or
// ctx), as a real backend waits for a dead peer.
type fakeBackend struct {
	block bool

	mu       sync.Mutex
	runs     []collectives.Args
	aborted  chan struct{}
	abortErr error
	closed   int
	started  chan struct{} // a Run began
	facts    collectives.PathFacts
}

func newFake(block bool) *fakeBackend {
	return &fakeBackend{block: block, aborted: make(chan struct{}), started: make(chan struct{}, 100)}
}

func (f *fakeBackend) Run(ctx context.Context, a *collectives.Args) error {
	f.mu.Lock()
	f.runs = append(f.runs, *a)
	f.mu.Unlock()
	f.started <- struct{}{}
	if !f.block {
		return nil
	}
	select {
	case <-f.aborted:
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.abortErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeBackend) Abort(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.abortErr == nil {
		f.abortErr = cause
		close(f.aborted)
	}
}

func (f *fakeBackend) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

// PathFacts reports what the test set (collectives.PathReporter).
func (f *fakeBackend) PathFacts(*collectives.Args) collectives.PathFacts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.facts
}

func (f *fakeBackend) setFacts(p collectives.PathFacts) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.facts = p
}

func (f *fakeBackend) runCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.runs)
}

// fakeFactory hands each rank its own fake and remembers them.
type fakeFactory struct {
	block bool
	mu    sync.Mutex
	made  map[int]*fakeBackend
}

func (ff *fakeFactory) New(ctx context.Context, b transport.Bootstrap, cfg BackendConfig) (collectives.Backend, error) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.made == nil {
		ff.made = map[int]*fakeBackend{}
	}
	f := newFake(ff.block)
	ff.made[b.Rank()] = f
	return f, nil
}

func (ff *fakeFactory) get(r int) *fakeBackend {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return ff.made[r]
}

// testOpts are quick options with a fake backend.
func testOpts(ff *fakeFactory) Options {
	return Options{NewBackend: ff.New, Timeout: 10 * time.Second, HeartbeatInterval: testHeartbeat, Env: map[string]string{}, Logger: discardLogger()}
}

// testHeartbeat is the tests' beat: peers give up on a silent rank after
// 5 of them, and a process starved of CPU that long (720 ms seen beside
// other tests on 2 cores with a 100 ms beat) fails its communicator as
// stalled. Tests of the heartbeat itself set their own.
const testHeartbeat = time.Second

// initGroup starts n ranks in goroutines with InitRank and returns them
// in rank order.
func initGroup(t *testing.T, n int, opts Options) []*Comm {
	t.Helper()
	comms, err := InitAll(context.Background(), make([]int, n), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	return comms
}

// eachRank runs f on every rank concurrently and returns the errors.
func eachRank(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func(i int, c *Comm) {
			defer wg.Done()
			errs[i] = f(c)
		}(i, c)
	}
	wg.Wait()
	return errs
}

func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errTest = errors.New("test cause")

package faults

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/collectives/host"
	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/transport"
)

// Scenario 10a: a low descriptor limit (RLIMIT_NOFILE, set in a child
// before it makes a 2-rank communicator). For every headroom from none to
// enough, the child either works or fails with an error naming the
// resource ("too many open files"), never crashes or hangs, and gives
// every descriptor back.
func TestLowFDLimit(t *testing.T) {
	spares := pick(14, 24)
	okSeen, errSeen := 0, 0
	var worst time.Duration
	for spare := 0; spare <= spares; spare++ {
		t.Run(fmt.Sprintf("spare=%d", spare), func(t *testing.T) {
			t0 := time.Now()
			p := spawn(t, childVar+"=rlimit", fmt.Sprintf("FAULTS_SPARE=%d", spare))
			l := p.expect(t, "RESULT", 15*time.Second)
			worst = max(worst, time.Since(t0))
			if l == "RESULT ok" {
				okSeen++
			} else {
				errSeen++
				assert.Contains(t, rest(l, "err"), "too many open files", "the error names the resource: %s", l)
			}
			leak := p.expect(t, "LEAK", 5*time.Second)
			assert.Equal(t, "0", field(leak, "fds"), "descriptors given back: %s (%s)", leak, l)
			assert.Equal(t, "0", field(leak, "maps"), "mappings given back: %s", leak)
			assert.Equal(t, 0, p.exitCode(t, 10*time.Second), "no crash")
			t.Log(l)
		})
	}
	assert.NotZero(t, errSeen, "the lowest limits must fail")
	assert.NotZero(t, okSeen, "enough headroom must work")
	t.Logf("scenario 10a: %d limits, %d failed cleanly, %d worked; slowest child %v", spares+1, errSeen, okSeen, worst)
}

// Scenario 10b: a shared segment larger than the address space. Init fails
// on every rank with an error naming the memory it could not map, within
// the bound, and nothing stays mapped.
func TestUnmappableSegment(t *testing.T) {
	opts := hostOpts()
	opts.Backend = comm.BackendHost
	opts.NewBackend = func(ctx context.Context, b transport.Bootstrap, cfg comm.BackendConfig) (collectives.Backend, error) {
		// 2 x 256 TiB staging: beyond any x86-64 or arm64 user address
		// space, so mmap fails before anything is touched.
		return host.New(ctx, b, host.Config{StagingBytes: 1 << 48, Logger: cfg.Logger})
	}
	base := settle(take())
	t0 := time.Now()
	comms, err := comm.InitAll(context.Background(), []int{0, 1}, opts)
	took := time.Since(t0)
	require.Error(t, err)
	require.Nil(t, comms)
	assert.Regexp(t, regexp.MustCompile(`(mmap|memfd|ftruncate).*(segment|memfd|bytes)`), err.Error())
	assert.Less(t, took, 10*time.Second)
	s := settle(base)
	assert.LessOrEqual(t, s.fds, base.fds, "descriptors (more than the baseline is a leak)")
	assert.Equal(t, 0, s.shmMaps, "mappings")
	assert.LessOrEqual(t, s.goroutines, base.goroutines, "goroutines (more than the baseline is a leak; an earlier test's may end late)")
	t.Logf("failed after %v: %v", took, err)
}

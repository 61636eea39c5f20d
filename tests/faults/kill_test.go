package faults

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
)

// job is a set of rank children of one unique id.
type job struct {
	id    comm.UniqueID
	ranks []*proc
}

// startJob starts nranks rank children with env added to each; extra[r]
// adds to rank r's only.
func startJob(t *testing.T, nranks int, env []string, extra map[int][]string) *job {
	t.Helper()
	return startChildren(t, "rank", nranks, nil, env, extra)
}

// startChildren starts the ranks of an nranks job (all when ranks is nil)
// as children in mode, with env added to each and extra[r] to rank r's;
// the ranks not started are nil in the job.
func startChildren(t *testing.T, mode string, nranks int, ranks []int, env []string, extra map[int][]string) *job {
	t.Helper()
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	j := &job{id: id, ranks: make([]*proc, nranks)}
	if ranks == nil {
		for r := 0; r < nranks; r++ {
			ranks = append(ranks, r)
		}
	}
	for _, r := range ranks {
		e := append([]string{childVar + "=" + mode, "FAULTS_ID=" + id.String(),
			"FAULTS_NRANKS=" + strconv.Itoa(nranks), "FAULTS_RANK=" + strconv.Itoa(r)}, env...)
		j.ranks[r] = spawn(t, append(e, extra[r]...)...)
	}
	return j
}

// failure is a survivor's report.
type failure struct {
	rank    int
	line    string
	latency time.Duration // from the fault to the error
}

// survivors waits for every rank but victim to print prefix (FAILED or
// INITFAIL) within bound of the fault at t0, and returns their reports.
func (j *job) survivors(t *testing.T, victim int, prefix string, t0 time.Time, bound time.Duration) []failure {
	t.Helper()
	var out []failure
	for r, p := range j.ranks {
		if r == victim {
			continue
		}
		left := time.Until(t0.Add(bound))
		l := p.expect(t, prefix, max(left, 0)+time.Second) // the check below is the bound
		lat := stamp(t, l).Sub(t0)
		assert.LessOrEqual(t, lat, bound, "rank %d reported after %v: %s", r, lat, l)
		out = append(out, failure{rank: r, line: l, latency: lat})
	}
	return out
}

func worst(fs []failure) time.Duration {
	var w time.Duration
	for _, f := range fs {
		w = max(w, f.latency)
	}
	return w
}

// Scenario 1: SIGKILL one rank while every rank loops on a collective.
// Every survivor's call fails within 10 s with a PeerError naming the dead
// rank, and gives back what it held.
func TestKillDuringCollective(t *testing.T) {
	const nranks = 3
	cases := []struct {
		coll   string
		count  int
		victim int
	}{
		{"allreduce", 1000, 1},
		{"allreduce", 1 << 21, 2}, // 8 MiB: two-shot, several staging rounds
		{"allgather", 1000, 1},
		{"allgather", 1 << 19, 2},
		{"reducescatter", 1000, 1},
		{"reducescatter", 1 << 19, 2},
		{"allreduce", 1000, 0}, // rank 0 holds the bootstrap star
		{"allgather", 1 << 19, 0},
		// Point-to-point: the dead rank's neighbours wait on it in a Send
		// (stuck mid-message: 4 MiB fills the ring) and a Recv; the third
		// rank of the ring hears it from them.
		{"sendrecv", 1 << 20, 1},
		{"sendrecv", 1000, 0},
		{"alltoall", 1 << 18, 2},
	}
	var worstAll time.Duration
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/count=%d/victim=%d", tc.coll, tc.count, tc.victim), func(t *testing.T) {
			j := startJob(t, nranks, []string{"FAULTS_COLL=" + tc.coll, "FAULTS_COUNT=" + strconv.Itoa(tc.count),
				"FAULTS_HB=1s", "GOCCL_TIMEOUT=30s"}, nil)
			fs := j.killInLoop(t, tc.victim, 20*time.Second)
			for _, f := range fs {
				assert.Equal(t, strconv.Itoa(tc.victim), field(f.line, "peer"), "rank %d must name the dead rank: %s", f.rank, f.line)
				assert.Equal(t, "true", field(f.line, "aborted"), f.line)
				assert.Contains(t, rest(f.line, "err"), fmt.Sprintf("rank %d failed", tc.victim), f.line)
				leak := j.ranks[f.rank].expect(t, "LEAK", 5*time.Second)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", leak, "rank %d after Close", f.rank)
				assert.Equal(t, 1, j.ranks[f.rank].exitCode(t, 10*time.Second))
			}
			worstAll = max(worstAll, worst(fs))
			t.Logf("worst time to error: %v", worst(fs))
		})
	}
	t.Logf("scenario 1: %d runs, worst time to error %v", len(cases), worstAll)
}

// Scenario 2: SIGSTOP one rank. Survivors fail with a timeout naming it,
// through the heartbeat (short interval) or through the collective's own
// timeout (GOCCL_TIMEOUT, heartbeat made long); nothing hangs, and the
// stopped rank, once continued, fails too instead of hanging, naming
// itself (it measures its own heartbeat gap) rather than a healthy peer.
func TestStopDuringCollective(t *testing.T) {
	const nranks = 3
	cases := []struct {
		name   string
		env    []string
		victim int
		bound  time.Duration
		stall  bool // the resumed rank measures its stall (longer than its peers wait)
	}{
		// 5 missed beats of 500 ms; no record of the stopped rank can
		// come then (its heartbeat stopped): about 2.5 s. The bounds leave
		// more than as much again for a loaded machine, and the beat is
		// long enough that a survivor starved of CPU for a second does not
		// take itself for the stalled rank.
		{"heartbeat/leaf", []string{"FAULTS_HB=500ms", "GOCCL_TIMEOUT=60s"}, 1, 10 * time.Second, true},
		{"heartbeat/root", []string{"FAULTS_HB=500ms", "GOCCL_TIMEOUT=60s"}, 0, 10 * time.Second, true},
		// The host backend's wait bound, heartbeat far longer: 3 s and
		// up to 3 s for the records (the stopped rank's never comes).
		{"collective-timeout/leaf", []string{"FAULTS_HB=20s", "GOCCL_TIMEOUT=3s"}, 2, 15 * time.Second, true},
		// A ring exchange: the stopped rank's neighbours wait on it in a
		// Send (4 MiB, past the ring: a rendezvous) and a Recv, each
		// bounded by the same timeout.
		{"sendrecv-timeout/leaf", []string{"FAULTS_HB=20s", "GOCCL_TIMEOUT=3s", "FAULTS_COLL=sendrecv", "FAULTS_COUNT=1048576"}, 1, 15 * time.Second, true},
		// Eager Sends (400 KB): rank 0's Send to the stopped rank 1
		// completes and rank 0 waits for rank 2, which waits for rank 1;
		// rank 0's timeout follows that chain to rank 1.
		{"sendrecv-eager-timeout/leaf", []string{"FAULTS_HB=20s", "GOCCL_TIMEOUT=3s", "FAULTS_COLL=sendrecv", "FAULTS_COUNT=100000"}, 1, 15 * time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := startJob(t, nranks, append([]string{"FAULTS_COLL=allreduce", "FAULTS_COUNT=4096"}, tc.env...), nil)
			for _, p := range j.ranks {
				p.expect(t, "ITER0", 20*time.Second)
			}
			v := j.ranks[tc.victim]
			t0 := time.Now()
			require.NoError(t, v.cmd.Process.Signal(syscall.SIGSTOP))
			fs := j.survivors(t, tc.victim, "FAILED", t0, tc.bound)
			for _, f := range fs {
				assert.Equal(t, strconv.Itoa(tc.victim), field(f.line, "peer"), "rank %d must name the stopped rank: %s", f.rank, f.line)
				assert.Equal(t, "true", field(f.line, "timeout"), "a stopped rank is a timeout (errors.Is ErrTimeout): %s", f.line)
				assert.Equal(t, 1, j.ranks[f.rank].exitCode(t, 10*time.Second))
			}
			t.Logf("worst time to error: %v", worst(fs))
			time.Sleep(time.Second) // the survivors have gone meanwhile
			tc0 := time.Now()
			require.NoError(t, v.cmd.Process.Signal(syscall.SIGCONT))
			l := v.expect(t, "FAILED", 10*time.Second)
			t.Logf("the stopped rank, continued, failed after %v: %s", stamp(t, l).Sub(tc0), l)
			// It names itself, not a healthy peer.
			assert.Equal(t, strconv.Itoa(tc.victim), field(l, "peer"), "the resumed rank must blame itself: %s", l)
			if tc.stall {
				assert.Contains(t, rest(l, "err"), "this rank stalled for", l)
			}
			assert.Equal(t, 1, v.exitCode(t, 10*time.Second))
		})
	}
}

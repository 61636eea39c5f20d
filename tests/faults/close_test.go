package faults

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/goccl/goccl/launcher"
)

// Scenario 11: a rank makes one call fewer than the others, closes its
// communicator cleanly and exits 0. Every other rank's outstanding call
// (which the early rank will never join) fails at once, not at the
// collective timeout, with an error naming the rank, saying that it closed
// with calls outstanding and after how many; nothing leaks.
func TestPeerClosesEarly(t *testing.T) {
	const nranks, iters = 3, 20
	var worstAll time.Duration
	for _, tc := range []struct {
		coll   string
		count  int
		victim int
	}{
		{"allreduce", 1000, 1},
		{"allreduce", 1 << 20, 2}, // two-shot, several staging rounds
		{"allgather", 1000, 0},    // rank 0 holds the bootstrap star
		{"reducescatter", 4096, 2},
	} {
		t.Run(fmt.Sprintf("%s/count=%d/victim=%d", tc.coll, tc.count, tc.victim), func(t *testing.T) {
			j := startJob(t, nranks, []string{"FAULTS_COLL=" + tc.coll, "FAULTS_COUNT=" + strconv.Itoa(tc.count),
				"FAULTS_ITERS=" + strconv.Itoa(iters), fmt.Sprintf("FAULTS_ITERS_%d=%d", tc.victim, iters-1)}, nil)
			v := j.ranks[tc.victim]
			v.expect(t, "OK", 30*time.Second)
			t0 := stamp(t, v.expect(t, "CLOSING", 10*time.Second))
			v.expect(t, "CLOSED", 10*time.Second)
			assert.Equal(t, 0, v.exitCode(t, 10*time.Second), "the early rank closed cleanly")
			fs := j.survivors(t, tc.victim, "FAILED", t0, 5*time.Second)
			for _, f := range fs {
				assert.Equal(t, strconv.Itoa(tc.victim), field(f.line, "peer"), "rank %d must name the closed rank: %s", f.rank, f.line)
				assert.Equal(t, "true", field(f.line, "aborted"), f.line)
				msg := rest(f.line, "err")
				assert.Contains(t, msg, fmt.Sprintf("rank %d failed", tc.victim), f.line)
				assert.Contains(t, msg, fmt.Sprintf("peer closed its communicator after call #%d, with calls still outstanding", iters-1), f.line)
				assert.Contains(t, msg, fmt.Sprintf("is in call #%d", iters), f.line)
				leak := j.ranks[f.rank].expect(t, "LEAK", 5*time.Second)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", leak, "rank %d after Close", f.rank)
				assert.Equal(t, 1, j.ranks[f.rank].exitCode(t, 10*time.Second))
			}
			worstAll = max(worstAll, worst(fs))
			t.Logf("worst time from the early rank's Close to a survivor's error: %v", worst(fs))
		})
	}
	t.Logf("scenario 11: worst time to error %v", worstAll)
}

// Scenario 11 under the launcher: the job fails (the survivors exit 1), the
// launcher names a survivor's failure, and every survivor's error names
// the rank that closed early.
func TestPeerClosesEarlyUnderLauncher(t *testing.T) {
	const np, victim, iters = 3, 1, 10
	j := launch(launcher.Config{
		NP: np, Env: rankEnv("FAULTS_COLL=allreduce", "FAULTS_COUNT=4096", "FAULTS_ITERS="+strconv.Itoa(iters),
			fmt.Sprintf("FAULTS_ITERS_%d=%d", victim, iters-1), "FAULTS_TERM=catch"),
		Grace: 10 * time.Second, Timeout: 120 * time.Second,
	})
	t0 := stamp(t, j.tg.expect(t, victim, "CLOSING", 30*time.Second))
	j.tg.expect(t, victim, "CLOSED", 10*time.Second)
	fs := j.tg.survivors(t, np, victim, t0, 10*time.Second)
	for _, f := range fs {
		assert.LessOrEqual(t, f.latency, 5*time.Second)
		assert.Contains(t, rest(f.line, "err"), "peer closed its communicator after call #9", f.line)
	}
	res, re := j.failedRank(t, 30*time.Second, "the launcher did not finish within 30 s of the early Close")
	assert.NotEqual(t, victim, re.Status.Rank, "the early rank exited 0")
	assert.Equal(t, 1, res.res.ExitCode)
	t.Logf("survivors' worst time to error %v; launcher: %v", worst(fs), res.err)
}

package faults

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Scenario 3: a rank dies during init. The others' init fails within 10 s
// with an error naming it, and leaves no descriptor, mapping, goroutine or
// socket behind (checked inside each survivor against what it held before
// init, and on the machine's abstract socket table and /dev/shm after).
func TestDeathDuringInit(t *testing.T) {
	const nranks = 3
	cases := []struct {
		name   string
		victim int
		inject string
		// start: which ranks start at once; the victim's fault is injected
		// by the test when inject is "" (it kills the victim after settle).
		start  []int
		settle time.Duration
		env    []string
		want   string // in every survivor's error
	}{
		// Rank 2 is started but never joins: only the (short) init timeout
		// can tell; rank 0 names it.
		{"never-joins", 2, "before-init", []int{0, 1, 2}, 0, []string{"GOCCL_TIMEOUT=3s"}, "2 did not join"},
		// Rank 2 reaches rank 0, then dies while rank 1 has not started:
		// rank 0 sees the connection close and fails at once, long before
		// the 60 s init timeout.
		{"joins-then-dies", 2, "", []int{0, 2}, time.Second, []string{"GOCCL_TIMEOUT=60s"}, "rank 2 failed"},
		// The job formed; rank 1 dies after the host backend agreed on its
		// configuration, before the segments are exchanged.
		{"after-allgather", 1, "after-allgather", []int{0, 1, 2}, 0, []string{"GOCCL_TIMEOUT=60s"}, "rank 1 failed"},
		// Rank 2 dies having passed its segment to one peer only.
		{"during-fd-exchange", 2, "in-sendfds", []int{0, 1, 2}, 0, []string{"GOCCL_TIMEOUT=60s"}, "rank 2 failed"},
		// Rank 0, the bootstrap's hub, dies after the allgather.
		{"root-after-allgather", 0, "after-allgather", []int{0, 1, 2}, 0, []string{"GOCCL_TIMEOUT=60s"}, "rank 0 failed"},
	}
	// The ranks get a TMPDIR of their own: other packages' tests, run
	// at the same time by go test ./..., make and remove goccl- files in
	// the shared one (launcher jobs' record directories, file
	// rendezvous, built libraries).
	tmp := t.TempDir()
	filesBefore := gocclFiles("/dev/shm")
	var worstAll time.Duration
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			extra := map[int][]string{}
			if tc.inject != "" {
				extra[tc.victim] = []string{"FAULTS_INJECT=" + tc.inject}
			}
			env := append([]string{"FAULTS_COLL=allreduce", "FAULTS_HB=1s", "TMPDIR=" + tmp}, tc.env...)
			j := startSome(t, nranks, tc.start, env, extra)
			t0 := time.Now()
			switch {
			case tc.inject == "before-init":
				j.ranks[tc.victim].expect(t, "READY", 10*time.Second)
				require.NoError(t, j.ranks[tc.victim].cmd.Process.Signal(syscall.SIGKILL))
				t0 = time.Now()
			case tc.inject == "":
				time.Sleep(tc.settle)
				require.NoError(t, j.ranks[tc.victim].cmd.Process.Signal(syscall.SIGKILL))
				t0 = time.Now()
			}
			var fs []failure
			for _, r := range tc.start {
				if r == tc.victim {
					continue
				}
				p := j.ranks[r]
				l := p.expect(t, "INITFAIL", 12*time.Second)
				lat := stamp(t, l).Sub(t0)
				assert.LessOrEqual(t, lat, 10*time.Second, "rank %d: %s", r, l)
				assert.Contains(t, rest(l, "err"), tc.want, "rank %d must name rank %d: %s", r, tc.victim, l)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", p.expect(t, "LEAK", 5*time.Second), "rank %d after its init failed", r)
				assert.Equal(t, 2, p.exitCode(t, 10*time.Second))
				fs = append(fs, failure{rank: r, line: l, latency: lat})
			}
			for _, p := range j.ranks {
				if p != nil {
					p.kill()
				}
			}
			assert.Empty(t, abstractSockets("goccl-"+j.id.Token()), "sockets of the failed job")
			worstAll = max(worstAll, worst(fs))
			t.Logf("worst time to error: %v", worst(fs))
		})
	}
	assert.ElementsMatch(t, filesBefore, gocclFiles("/dev/shm"), "files in /dev/shm")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "files in the ranks' TMPDIR")
	t.Logf("scenario 3: %d runs, worst time to error %v", len(cases), worstAll)
}

// startSome is startJob for a subset of the ranks (the others are nil).
func startSome(t *testing.T, nranks int, ranks []int, env []string, extra map[int][]string) *job {
	t.Helper()
	return startChildren(t, "rank", nranks, ranks, env, extra)
}

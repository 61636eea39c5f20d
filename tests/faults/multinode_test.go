package faults

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/goccl/goccl/internode/ucx"
)

// onFakeNodes puts rank r of nranks on fake node r/per (GOCCL_HOSTID).
func onFakeNodes(nranks, per int) map[int][]string {
	extra := map[int][]string{}
	for r := 0; r < nranks; r++ {
		extra[r] = []string{fmt.Sprintf("GOCCL_HOSTID=fake-node-%d", r/per)}
	}
	return extra
}

// SIGKILL one rank of a job on fake nodes of two ranks (the host backend,
// UCX over TCP between the nodes) while every rank loops on a call: every
// survivor, on the victim's node and on the others, fails within 10 s
// naming the dead rank, and gives back what it held.
func TestKillAcrossNodes(t *testing.T) {
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp not available (install libucx0): %v", err)
	}
	cases := []struct {
		coll   string
		count  int
		nranks int
		victim int
	}{
		{"allreduce", 1000, 4, 3},
		{"allreduce", 1 << 20, 4, 2}, // 4 MiB: UCX's rendezvous, several node rounds
		{"allreduce", 1001, 6, 4},    // a count the node cannot split
		{"allgather", 1 << 16, 6, 1},
		{"reducescatter", 1000, 4, 2},
		{"allreduce", 1000, 4, 0}, // rank 0 holds the bootstrap star
		{"sendrecv", 1 << 18, 4, 1},
		{"alltoall", 1 << 14, 6, 5},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/count=%d/nranks=%d/victim=%d", tc.coll, tc.count, tc.nranks, tc.victim), func(t *testing.T) {
			j := startJob(t, tc.nranks, []string{"FAULTS_COLL=" + tc.coll, "FAULTS_COUNT=" + strconv.Itoa(tc.count),
				"FAULTS_HB=1s", "GOCCL_TIMEOUT=30s", "GOCCL_BACKEND=host", "UCX_TLS=tcp,self"}, onFakeNodes(tc.nranks, 2))
			fs := j.killInLoop(t, tc.victim, 30*time.Second)
			for _, f := range fs {
				assert.Equal(t, strconv.Itoa(tc.victim), field(f.line, "peer"), "rank %d must name the dead rank: %s", f.rank, f.line)
				assert.Contains(t, rest(f.line, "err"), fmt.Sprintf("rank %d failed", tc.victim), f.line)
				t.Logf("rank %d: %s", f.rank, f.line)
				// Closing gives back the node's shared memory and UCX's
				// sockets and descriptors too.
				leak := j.ranks[f.rank].expect(t, "LEAK", 5*time.Second)
				assert.Equal(t, "LEAK fds=0 maps=0 goroutines=0 socks=0", leak, "rank %d after Close", f.rank)
				assert.Equal(t, 1, j.ranks[f.rank].exitCode(t, 15*time.Second))
			}
			t.Logf("worst time to error: %v", worst(fs))
		})
	}
}

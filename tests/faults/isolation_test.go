package faults

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/comm"
	"github.com/goccl/goccl/launcher"
)

// Scenario 7: two jobs on this machine at once, same rank numbers, under
// the launcher (each with its own port and token). Each rank checks every
// result against its own job's values: any cross-talk shows up as a wrong
// sum or a failed job.
func TestTwoJobsAtOnce(t *testing.T) {
	const np = 3
	iters := pick(100, 1000)
	jobs := []struct {
		coll  string
		value int
	}{{"allreduce", 1000}, {"allreduce", 500000}}
	var wg sync.WaitGroup
	outs := make([]*bytes.Buffer, len(jobs))
	errs := make([]error, len(jobs))
	t0 := time.Now()
	for i, jb := range jobs {
		outs[i] = &bytes.Buffer{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = launcher.Run(context.Background(), launcher.Config{
				NP: np, Program: os.Args[0], Args: []string{"-test.run=^$"}, TagOutput: true,
				Env: rankEnv("FAULTS_COLL="+jb.coll, "FAULTS_COUNT=65536", fmt.Sprintf("FAULTS_ITERS=%d", iters),
					fmt.Sprintf("FAULTS_VALUE=%d", jb.value)),
				Stdout: outs[i], Stderr: io.Discard, Timeout: 120 * time.Second, Logger: quiet(),
			})
		}()
	}
	wg.Wait()
	for i := range jobs {
		out := outs[i].String()
		require.NoError(t, errs[i], "job %d:\n%s", i, out)
		for r := 0; r < np; r++ {
			assert.Contains(t, out, fmt.Sprintf("[%d] OK", r), "job %d rank %d", i, r)
		}
		assert.NotContains(t, out, "BADRESULT")
	}
	t.Logf("two %d-rank jobs of %d AllReduces each, side by side: %v", np, iters, time.Since(t0))
}

// Scenario 8: a process outside the job sends a rank's fd socket datagrams
// carrying descriptors: garbage, a forged header with the job's magic
// claiming to be rank 1, the wrong magic, a count that lies, an oversize
// payload. Each is rejected, every descriptor it carried is closed (this
// process's descriptor count is unchanged), and the job works afterwards.
func TestForeignFDSender(t *testing.T) {
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	comms, errs := initRanks(context.Background(), id, 2, func(int) comm.Options { return hostOpts() })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer closeAll(t, comms)
	sock := fmt.Sprintf("@goccl-%s-%d", id.Token(), 0)
	require.Contains(t, abstractSockets(id.Token()), sock, "rank 0's fd socket, named as comm names it")
	cases := []struct {
		name    string
		payload string
		nfds    int
	}{
		{"garbage", "not a goccl message", 1},
		{"forged-rank-1", fdPayload(id.Magic(), 1, 2), 2},
		{"wrong-magic", fdPayload(id.Magic()^1, 1, 1), 1},
		{"count-lies", fdPayload(id.Magic(), 1, 0), 3},
		{"claims-rank-9", fdPayload(id.Magic(), 9, 1), 1},
		{"oversize", fdPayload(id.Magic(), 1, 1) + strings.Repeat("x", 100), 1},
		{"no-fds", "x", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := countFDs()
			p := spawn(t, childVar+"=foreign", "FAULTS_SOCK="+sock, "FAULTS_PAYLOAD="+hex.EncodeToString([]byte(tc.payload)), fmt.Sprintf("FAULTS_NFDS=%d", tc.nfds))
			p.expect(t, "SENT", 10*time.Second)
			assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
			deadline := time.Now().Add(2 * time.Second)
			for countFDs() != before && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			assert.Equal(t, before, countFDs(), "descriptors after a forged message (payload %s)", hex.EncodeToString([]byte(tc.payload))[:min(16, 2*len(tc.payload))])
		})
	}
	checkAllReduce(t, comms, 1024, 11)
	for _, c := range comms {
		require.NoError(t, c.Err())
	}
}

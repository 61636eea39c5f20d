package faults

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
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
	sock := fdSocketOf(t, id.Token(), 0)
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

// fdSocketOf finds rank's fd socket of the job with token: its name is
// "@goccl-<token>-<rank>-<nonce>", the nonce drawn by rank 0 (fdsock.go).
func fdSocketOf(t *testing.T, token string, rank int) string {
	t.Helper()
	socks := abstractSockets(fmt.Sprintf("goccl-%s-%d-", token, rank))
	require.Len(t, socks, 1, "rank %d's fd socket", rank)
	return socks[0]
}

// dropCounter is a log handler that counts the fd socket's drop warnings
// and adds up the drops they report.
type dropCounter struct {
	mu           sync.Mutex
	lines, drops int
	whys         []string
}

func (d *dropCounter) Enabled(context.Context, slog.Level) bool { return true }
func (d *dropCounter) WithAttrs([]slog.Attr) slog.Handler       { return d }
func (d *dropCounter) WithGroup(string) slog.Handler            { return d }
func (d *dropCounter) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "fd socket") {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lines++
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "count":
			d.drops += int(a.Value.Int64())
		case "why":
			d.whys = append(d.whys, a.Value.String())
		}
		return true
	})
	return nil
}

// Scenario 8, flood: processes outside the job send a rank's fd socket
// thousands of datagrams (wrong magic; and, when the tests run as root,
// another user's). Every one is dropped and counted, the log gets a line
// or two per sender rather than one per message, and the job works on.
func TestFDSocketFlood(t *testing.T) {
	const n = 3000
	dc := &dropCounter{}
	id, err := comm.NewUniqueID()
	require.NoError(t, err)
	comms, errs := initRanks(context.Background(), id, 2, func(r int) comm.Options {
		o := hostOpts()
		if r == 0 {
			o.Logger = slog.New(dc)
		}
		return o
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	sock := fdSocketOf(t, id.Token(), 0)
	senders := [][]string{{"FAULTS_PAYLOAD=" + hex.EncodeToString([]byte(fdPayload(id.Magic()^1, 1, 0)))}}
	if os.Getuid() == 0 {
		senders = append(senders, []string{"FAULTS_PAYLOAD=" + hex.EncodeToString([]byte(fdPayload(id.Magic(), 1, 0))), "FAULTS_UID=65534"})
	}
	t0 := time.Now()
	for _, env := range senders {
		p := spawn(t, append([]string{childVar + "=foreign", "FAULTS_SOCK=" + sock, "FAULTS_NFDS=0", fmt.Sprintf("FAULTS_REPEAT=%d", n)}, env...)...)
		p.expect(t, "SENT", 30*time.Second)
		assert.Equal(t, 0, p.exitCode(t, 10*time.Second))
	}
	sent := time.Since(t0)
	checkAllReduce(t, comms, 1024, 13)
	time.Sleep(100 * time.Millisecond) // the reader drains what is queued
	closeAll(t, comms)
	dc.mu.Lock()
	defer dc.mu.Unlock()
	t.Logf("%d datagrams from %d senders in %v: %d log lines, %d drops counted; reasons: %v", n*len(senders), len(senders), sent, dc.lines, dc.drops, dc.whys)
	assert.Equal(t, n*len(senders), dc.drops, "every datagram dropped and counted")
	assert.LessOrEqual(t, dc.lines, 4*len(senders), "a line or two per sender, not one per message")
	if len(senders) > 1 {
		assert.Contains(t, strings.Join(dc.whys, "|"), "uid 65534", "another user's messages are dropped for their uid")
	}
}

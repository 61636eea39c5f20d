package comm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/onheap"
	"github.com/goccl/goccl/internal/syncbuf"
	"github.com/goccl/goccl/recorder"
)

func hostCommsEnv(t *testing.T, n int, env map[string]string) []*Comm {
	t.Helper()
	devs := make([]int, n)
	comms, err := InitAll(context.Background(), devs, Options{Backend: BackendHost, Env: env, Logger: discardLogger()})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	return comms
}

// each runs f on every communicator at once.
func eachComm(comms []*Comm, f func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	return errs
}

type call struct {
	coll  string
	count int
}

// runCalls makes calls on every rank: AllReduce, Broadcast (root 1) or
// AllGather of random sizes.
func runCalls(t *testing.T, comms []*Comm, calls []call) {
	t.Helper()
	n := len(comms)
	errs := eachComm(comms, func(c *Comm) error {
		ctx := context.Background()
		for _, k := range calls {
			send := onheap.Slice(make([]float32, k.count))
			recv := onheap.Slice(make([]float32, k.count*n))
			sp, rp := uintptr(unsafe.Pointer(&send[0])), uintptr(unsafe.Pointer(&recv[0]))
			var err error
			switch k.coll {
			case "AllReduce":
				err = c.AllReduce(ctx, sp, rp, k.count, Float32, Sum, 0)
			case "Broadcast":
				err = c.Broadcast(ctx, sp, rp, k.count, Float32, 1, 0)
			case "AllGather":
				err = c.AllGather(ctx, sp, rp, k.count, Float32, 0)
			}
			runtime.KeepAlive(send)
			runtime.KeepAlive(recv)
			if err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func randomCalls(k int) []call {
	kinds := []string{"AllReduce", "Broadcast", "AllGather"}
	out := make([]call, k)
	for i := range out {
		out[i] = call{kinds[rand.IntN(len(kinds))], 1 + rand.IntN(5000)}
	}
	return out
}

// TestRecordAndStats: every rank's record lists the calls made, numbered
// alike, finished, in order; Stats counts them per kind and size class.
func TestRecordAndStats(t *testing.T) {
	const n = 3
	comms := hostCommsEnv(t, n, map[string]string{"GOCCL_RECORDER_SIZE": "16"})
	calls := randomCalls(20)
	runCalls(t, comms, calls)
	for _, c := range comms {
		rec := c.Record()
		assert.Equal(t, c.Rank(), rec.Rank)
		assert.Equal(t, n, rec.Size)
		assert.Equal(t, "host", rec.Backend)
		require.Len(t, rec.Calls, 16, "the ring keeps GOCCL_RECORDER_SIZE calls")
		assert.Equal(t, uint64(4), rec.Dropped)
		for i, got := range rec.Calls {
			want := calls[4+i]
			assert.Equal(t, uint64(5+i), got.Seq)
			assert.Equal(t, want.coll, got.Call)
			assert.Equal(t, int64(want.count), got.Count)
			assert.Equal(t, "finished", got.State)
			assert.Equal(t, "shm", got.Transport, "call %d", got.Seq)
			wantAlgo := ""
			if want.coll == "AllReduce" || want.coll == "Reduce" {
				wantAlgo = "oneshot"
				if want.count*4 > 256<<10 {
					wantAlgo = "twoshot"
				}
			}
			assert.Equal(t, wantAlgo, got.Algo, "call %d: %s of %d", got.Seq, want.coll, want.count)
			assert.LessOrEqual(t, got.Start, got.Finish)
			if i > 0 {
				assert.GreaterOrEqual(t, got.Start, rec.Calls[i-1].Finish)
			}
		}
		// Stats against the calls, counted here.
		type key struct {
			call string
			size int64
		}
		want := map[key]uint64{}
		for _, k := range calls {
			bytes := int64(k.count * 4)
			if k.coll == "AllGather" {
				bytes *= n
			}
			sc := int64(1)
			for sc < bytes {
				sc *= 2
			}
			want[key{k.coll, sc}]++
		}
		got := map[key]uint64{}
		for _, s := range c.Stats() {
			got[key{s.Call, s.SizeClass}] = s.Count
			assert.Positive(t, s.BusBW, "%s %d", s.Call, s.SizeClass)
			assert.Zero(t, s.Link, "no link ceiling on the host backend")
			assert.LessOrEqual(t, s.P50, s.P99)
			assert.LessOrEqual(t, s.P99, s.Max)
		}
		assert.Equal(t, want, got, "rank %d", c.Rank())
	}
}

func TestRecorderOff(t *testing.T) {
	comms := hostCommsEnv(t, 2, map[string]string{"GOCCL_RECORDER_SIZE": "0"})
	runCalls(t, comms, randomCalls(3))
	assert.Empty(t, comms[0].Record().Calls)
	assert.Nil(t, comms[0].Stats())
}

func TestRecorderEnvInvalid(t *testing.T) {
	for _, kv := range [][2]string{{"GOCCL_RECORDER_SIZE", "-1"}, {"GOCCL_RECORDER_SIZE", "many"},
		{"GOCCL_RECORDER_SIZE", "1048577"}, {"GOCCL_RECORDER_SIGNAL", "yes"}} {
		_, err := InitAll(context.Background(), []int{0, 1}, Options{Backend: BackendHost, Env: map[string]string{kv[0]: kv[1]}, Logger: discardLogger()})
		require.ErrorIs(t, err, ErrInvalidArgument, "%s=%s", kv[0], kv[1])
		assert.Contains(t, err.Error(), kv[0])
	}
}

// TestMetricsEndpoint scrapes GOCCL_METRICS_ADDR and parses it with the
// Prometheus parser: the call counts and bytes are those made.
func TestMetricsEndpoint(t *testing.T) {
	const n = 2
	comms := hostCommsEnv(t, n, map[string]string{"GOCCL_METRICS_ADDR": "127.0.0.1:0"})
	calls := []call{{"AllReduce", 1000}, {"AllReduce", 1000}, {"AllReduce", 1024}, {"AllGather", 10}}
	runCalls(t, comms, calls)
	addr := MetricsAddr()
	require.NotEmpty(t, addr)
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	counts := map[string]float64{} // "rank call size" -> count
	for _, m := range fams["goccl_calls_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		counts[fmt.Sprintf("%s %s %s", l["rank"], l["call"], l["size_class"])] = m.GetCounter().GetValue()
	}
	for r := 0; r < n; r++ {
		assert.Equal(t, 3.0, counts[fmt.Sprintf("%d AllReduce 4096", r)], "rank %d", r)
		assert.Equal(t, 1.0, counts[fmt.Sprintf("%d AllGather 128", r)], "rank %d", r)
	}
	assert.Len(t, counts, 2*n)
	h := fams["goccl_call_duration_seconds"]
	require.NotNil(t, h)
	for _, m := range h.GetMetric() {
		hist := m.GetHistogram()
		assert.Positive(t, hist.GetSampleSum())
		bs := hist.GetBucket()
		require.NotEmpty(t, bs)
		assert.Equal(t, hist.GetSampleCount(), bs[len(bs)-1].GetCumulativeCount())
	}
	require.NotNil(t, fams["goccl_bytes_total"])
	require.NotNil(t, fams["goccl_busbw_gbps"])
	assert.Nil(t, fams["goccl_link_ceiling_gbps"], "the host backend knows no link ceiling")
}

// TestMetricsEndpointLogged: at INFO the rank that opens the endpoint says
// where it listens, the system's port included when GOCCL_METRICS_ADDR asks
// for port 0; an address that cannot be used is a warning naming it.
func TestMetricsEndpointLogged(t *testing.T) {
	for _, tc := range []struct {
		addr string
		want func() string
	}{
		{"127.0.0.1:0", func() string { return `msg="goccl: metrics endpoint" rank=0 url=http://` + MetricsAddr() + "/metrics" }},
		{"no-port", func() string { return `level=WARN msg="goccl: metrics endpoint" rank=0 addr=no-port err=` }},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			require.Empty(t, MetricsAddr(), "another test's endpoint is still open")
			var log syncbuf.Buffer
			comms, err := InitAll(context.Background(), []int{0}, Options{Backend: BackendHost,
				Env:    map[string]string{"GOCCL_METRICS_ADDR": tc.addr},
				Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			require.NoError(t, err, "a bad address fails no init")
			assert.Contains(t, log.String(), tc.want())
			require.NoError(t, comms[0].Close())
		})
	}
}

// TestDumpOnSIGUSR1: the signal makes every rank write its record to
// GOCCL_RECORDER_DIR, and the ranks go on.
func TestDumpOnSIGUSR1(t *testing.T) {
	dir := t.TempDir()
	comms := hostCommsEnv(t, 2, map[string]string{"GOCCL_RECORDER_DIR": dir})
	runCalls(t, comms, randomCalls(5))
	t0 := time.Now()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGUSR1))
	for _, c := range comms {
		path := filepath.Join(dir, recorder.FileName(c.Rank(), c.obs.comm))
		require.Eventually(t, func() bool {
			rec, err := recorder.ReadFile(path)
			return err == nil && rec.Reason == "dump" && rec.Written >= t0.UnixNano()
		}, 10*time.Second, 10*time.Millisecond, "rank %d", c.Rank())
		rec, err := recorder.ReadFile(path)
		require.NoError(t, err)
		assert.Len(t, rec.Calls, 5)
		assert.Equal(t, os.Getpid(), rec.PID)
	}
	runCalls(t, comms, randomCalls(2)) // still working
}

// oneRank is a one-rank host communicator and an 8-byte buffer.
func oneRank(tb testing.TB, size string) (*Comm, uintptr, []float32) {
	tb.Helper()
	comms, err := InitAll(context.Background(), []int{0}, Options{Backend: BackendHost, Env: map[string]string{"GOCCL_RECORDER_SIZE": size}, Logger: discardLogger()})
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = comms[0].Close() })
	buf := make([]float32, 2)
	return comms[0], uintptr(unsafe.Pointer(&buf[0])), buf
}

// TestRecordingAllocatesNothing: a call costs the same allocations, none,
// with the recorder on as off.
func TestRecordingAllocatesNothing(t *testing.T) {
	for _, size := range []string{"0", "2000"} {
		c, p, buf := oneRank(t, size)
		ctx := context.Background()
		require.NoError(t, c.AllReduce(ctx, p, p, 2, Float32, Sum, 0))
		n := testing.AllocsPerRun(500, func() { _ = c.AllReduce(ctx, p, p, 2, Float32, Sum, 0) })
		runtime.KeepAlive(buf)
		assert.Zero(t, n, "GOCCL_RECORDER_SIZE=%s", size)
	}
}

// BenchmarkCallRecorder is an 8-byte AllReduce on one host rank, the
// recorder off and on: the difference is what recording adds to a call.
func BenchmarkCallRecorder(b *testing.B) {
	for _, size := range []string{"0", "2000"} {
		b.Run("size="+size, func(b *testing.B) {
			c, p, buf := oneRank(b, size)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := c.AllReduce(ctx, p, p, 2, Float32, Sum, 0); err != nil {
					b.Fatal(err)
				}
			}
			runtime.KeepAlive(buf)
		})
	}
}

// TestRecorderNamesRecv: a rank waiting in a Recv (no call number) from a
// peer that closes is named with the Recv, and the peer with its last
// call, in the error's recorder line.
func TestRecorderNamesRecv(t *testing.T) {
	comms, err := InitAll(context.Background(), make([]int, 2), Options{Backend: BackendHost, Env: map[string]string{},
		Logger: discardLogger(), Timeout: 60 * time.Second, HeartbeatInterval: testHeartbeat})
	require.NoError(t, err)
	defer comms[0].Close()
	const calls = 4
	small := make([][]float32, 2)
	errs := eachComm(comms, func(c *Comm) error {
		small[c.Rank()] = make([]float32, 16)
		p := uintptr(unsafe.Pointer(&small[c.Rank()][0]))
		for range calls {
			if err := c.AllReduce(context.Background(), p, p, 16, Float32, Sum, 0); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	buf := make([]int32, 1<<20) // 4 MiB
	done := make(chan error, 1)
	go func() { done <- comms[0].Recv(context.Background(), ptr32(buf), len(buf), Int32, 1, 0) }()
	require.Eventually(t, func() bool {
		rec := comms[0].Record()
		return len(rec.Calls) == calls+1 && rec.Calls[calls].Call == "Recv"
	}, 20*time.Second, time.Millisecond, "rank 0 entered its Recv")
	require.NoError(t, comms[1].Close())
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the Recv from a closed peer did not end")
	}
	runtime.KeepAlive(buf)
	require.ErrorIs(t, err, ErrPeerClosed)
	msg := err.Error()
	t.Log(msg)
	assert.Contains(t, msg, "flight recorder: rank 0 waits in a Recv from rank 1 (int32, 4 MiB)")
	assert.Contains(t, msg, fmt.Sprintf("rank 1's last call: AllReduce #%d, finished, then it closed its communicator", calls))
	assert.NotContains(t, msg, "no rank is in a call")
	// A later call fails at once, with the same explanation.
	later := comms[0].AllReduce(context.Background(), uintptr(unsafe.Pointer(&small[0][0])), uintptr(unsafe.Pointer(&small[0][0])), 16, Float32, Sum, 0)
	require.ErrorIs(t, later, ErrPeerClosed)
	assert.Contains(t, later.Error(), "flight recorder: rank 0 waits in a Recv from rank 1 (int32, 4 MiB)")
	rec := comms[0].Record()
	require.Len(t, rec.Calls, calls+1)
	got := rec.Calls[calls]
	assert.Equal(t, []any{"Recv", uint64(0), 1, "int32", int64(len(buf)), "failed"},
		[]any{got.Call, got.Seq, got.Peer, got.Type, got.Count, got.State})
}

// TestRecordsOverBootstrap: a record one rank shares reaches every other
// rank (through rank 0, relayed, or from it), the latest kept; a closing
// rank shares its own with reason "close".
func TestRecordsOverBootstrap(t *testing.T) {
	const n = 3
	comms := hostCommsEnv(t, n, map[string]string{})
	runCalls(t, comms, []call{{"AllReduce", 64}, {"Broadcast", 8}})
	await := func(t *testing.T, at *Comm, from int, reason string) recorder.Record {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			recs, more := at.boot.peerRecords()
			if b := recs[from]; b != nil {
				var rec recorder.Record
				require.NoError(t, json.Unmarshal(b, &rec))
				if rec.Reason == reason {
					return rec
				}
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("rank %d: no %q record from rank %d", at.Rank(), reason, from)
			}
		}
	}
	for _, from := range []int{0, 2} { // the root, and a leaf relayed by it
		comms[from].shareRecord("dump", nil)
		for _, at := range comms {
			if at.Rank() == from {
				continue
			}
			rec := await(t, at, from, "dump")
			assert.Equal(t, from, rec.Rank)
			require.Len(t, rec.Calls, 2)
			assert.Equal(t, "Broadcast", rec.Calls[1].Call)
		}
	}
	require.NoError(t, comms[1].Close())
	for _, r := range []int{0, 2} {
		rec := await(t, comms[r], 1, "close")
		assert.Equal(t, uint64(2), rec.Calls[len(rec.Calls)-1].Seq)
	}
}

// TestAbortBetweenCallsExplained: an abort that reaches ranks between
// their calls is explained by the next call's entry, as a call that met
// it would be, on collectives and point-to-point alike; later calls
// return the same text.
func TestAbortBetweenCallsExplained(t *testing.T) {
	comms := hostCommsEnv(t, 3, map[string]string{})
	buf := make([][]float32, 3)
	errs := eachComm(comms, func(c *Comm) error {
		buf[c.Rank()] = make([]float32, 16)
		p := uintptr(unsafe.Pointer(&buf[c.Rank()][0]))
		for range 2 {
			if err := c.AllReduce(context.Background(), p, p, 16, Float32, Sum, 0); err != nil {
				return err
			}
		}
		return nil
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	comms[2].Abort(errors.New("the application gave up"))
	for _, c := range comms[:2] {
		require.Eventually(t, func() bool { return c.Err() != nil }, 10*time.Second, time.Millisecond)
	}
	p0 := uintptr(unsafe.Pointer(&buf[0][0]))
	first := comms[0].AllReduce(context.Background(), p0, p0, 16, Float32, Sum, 0)
	require.ErrorIs(t, first, ErrAborted)
	assert.Contains(t, first.Error(), "the application gave up")
	assert.Contains(t, first.Error(), "; flight recorder: ")
	later := comms[0].AllReduce(context.Background(), p0, p0, 16, Float32, Sum, 0)
	assert.Equal(t, first.Error(), later.Error())
	p1 := uintptr(unsafe.Pointer(&buf[1][0]))
	send := comms[1].Send(context.Background(), p1, 16, Float32, 0, 0)
	require.ErrorIs(t, send, ErrAborted)
	assert.Contains(t, send.Error(), "; flight recorder: ")
	runtime.KeepAlive(buf)
}

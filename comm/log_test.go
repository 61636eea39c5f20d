package comm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/internal/onheap"
	"github.com/goccl/goccl/internal/syncbuf"
)

// INFO says how the host backend is wired at init; TRACE adds each call.
func TestDebugLevels(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		calls bool
	}{{slog.LevelInfo, false}, {LevelTrace, true}} {
		t.Run(tc.level.String(), func(t *testing.T) {
			var logs syncbuf.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: tc.level}))
			comms, err := InitAll(context.Background(), []int{0, 1}, Options{Backend: BackendHost, Env: map[string]string{}, Logger: log})
			require.NoError(t, err)
			errs := eachRank(comms, func(c *Comm) error {
				b := onheap.Slice(make([]float32, 64))
				p := uintptr(unsafe.Pointer(&b[0]))
				return c.AllReduce(context.Background(), p, p, len(b), Float32, Sum, 0)
			})
			for _, err := range errs {
				require.NoError(t, err)
			}
			for _, err := range eachRank(comms, func(c *Comm) error { return c.Close() }) {
				require.NoError(t, err)
			}
			out := logs.String()
			assert.Equal(t, 2, strings.Count(out, `msg="goccl: host backend ready"`), out)
			assert.Contains(t, out, `transport="shm to every peer`)
			assert.Contains(t, out, `algo="by size: oneshot up to 262144 B, twoshot above"`)
			assert.Contains(t, out, `staging="2 x 2097152 B per rank"`)
			if tc.calls {
				assert.Equal(t, 2, strings.Count(out, `msg="goccl: call"`), out)
				assert.Contains(t, out, "seq=1 coll=all_reduce count=64 type=float op=sum root=0")
			} else {
				assert.NotContains(t, out, "goccl: call")
			}
		})
	}
}

// A failure reaches the caller as an error; at the default level (WARN)
// it adds no log lines on top of it, on any rank.
func TestFailureLogsNoWarnings(t *testing.T) {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	comms, err := InitAll(context.Background(), []int{0, 1}, Options{Backend: BackendHost, Env: map[string]string{}, Logger: log})
	require.NoError(t, err)
	comms[1].Abort(errors.New("test abort"))
	b := make([]float32, 64)
	err = AllReduceSlice(context.Background(), comms[0], b, b, Sum)
	require.ErrorIs(t, err, ErrAborted)
	assert.Contains(t, err.Error(), "test abort")
	for _, c := range comms {
		_ = c.Close()
	}
	assert.NotContains(t, logs.String(), "level=WARN", logs.String())
}

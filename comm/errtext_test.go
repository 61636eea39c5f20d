package comm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/transport"
)

// Every error a call returns reads alike: "goccl: rank N: " once, N the
// rank that returns it, then what failed, then the sentinel's own words;
// errors.Is finds the sentinel and errors.As the PeerError with its
// fields. One representative of each kind: bad arguments (collectives,
// point-to-point, typed helpers, groups, Alloc, Split, Shrink, premulsum),
// a failed peer, a timeout, a closed peer, a closed communicator.
func TestErrorTexts(t *testing.T) {
	ctx := context.Background()
	buf := make([]float32, 64)
	p := addr(buf)
	for _, tc := range []struct {
		name  string
		n     int
		opts  func(*Options)
		fail  func(t *testing.T, comms []*Comm) error // rank 0's error
		is    error
		want  string // the whole text; empty: only the prefix and wantI
		wantI string // a part of the text
		peer  int    // the rank a PeerError names; -1: none
		noRnk bool   // no rank yet: "goccl: " alone
	}{
		{name: "collective datatype", n: 2, is: collectives.ErrUnknownDataType, peer: -1,
			want: "goccl: rank 0: all_reduce: datatype 99: unknown datatype",
			fail: func(_ *testing.T, c []*Comm) error { return c[0].AllReduce(ctx, p, p, 4, DataType(99), Sum, 0) }},
		{name: "collective root", n: 2, is: collectives.ErrInvalidRoot, peer: -1,
			want: "goccl: rank 0: broadcast: root 5 not in [0,2): invalid root",
			fail: func(_ *testing.T, c []*Comm) error { return c[0].Broadcast(ctx, p, p, 4, Float32, 5, 0) }},
		{name: "send peer", n: 2, is: collectives.ErrInvalidPeer, peer: -1,
			want: "goccl: rank 0: Send: peer 7 not in [0,2): invalid peer",
			fail: func(_ *testing.T, c []*Comm) error { return c[0].Send(ctx, p, 4, Float32, 7, 0) }},
		{name: "alltoallv counts", n: 2, is: collectives.ErrInvalidArgument, peer: -1,
			want: "goccl: rank 0: AllToAllv: sendCounts has 1 entries, want 2 (one per rank): invalid argument",
			fail: func(_ *testing.T, c []*Comm) error {
				return c[0].AllToAllv(ctx, p, []int{1}, []int{0}, p, []int{1, 1}, []int{0, 1}, Float32, 0)
			}},
		{name: "typed helper", n: 2, is: collectives.ErrInvalidCount, peer: -1,
			want: "goccl: rank 0: AllReduceSlice: recv has 3 elements, want 64: invalid count",
			fail: func(_ *testing.T, c []*Comm) error { return AllReduceSlice(ctx, c[0], buf, buf[:3], Sum) }},
		{name: "group run", n: 2, is: collectives.ErrUnknownDataType, peer: -1,
			want: "goccl: rank 0: all_reduce: datatype 99: unknown datatype",
			fail: func(_ *testing.T, c []*Comm) error {
				g := NewGroup()
				_ = g.AllReduce(c[0], p, p, 4, DataType(99), Sum, 0)
				return g.Run(ctx)
			}},
		{name: "premulsum", n: 2, is: collectives.ErrUnknownDataType, peer: -1,
			want: "goccl: rank 0: CreatePreMulSum: datatype 99: unknown datatype",
			fail: func(_ *testing.T, c []*Comm) error {
				_, err := c[0].CreatePreMulSum(Scalar{}, DataType(99))
				return err
			}},
		{name: "alloc", n: 2, is: collectives.ErrInvalidArgument, peer: -1, wantI: "host backend: alloc: size",
			fail: func(_ *testing.T, c []*Comm) error {
				return eachRank(c, func(c *Comm) error { _, _, err := c.Alloc(ctx, 1<<50); return err })[0]
			}},
		{name: "allocslice", n: 2, is: collectives.ErrInvalidArgument, peer: -1, wantI: "AllocSlice: n is 0, want a positive count",
			fail: func(_ *testing.T, c []*Comm) error {
				return eachRank(c, func(c *Comm) error { _, _, err := AllocSlice[float32](ctx, c, 0); return err })[0]
			}},
		{name: "split color", n: 2, is: collectives.ErrInvalidArgument, peer: -1,
			want: "goccl: rank 0: Split: invalid argument: color -5: want a color >= 0, or NoColor (-1)",
			fail: func(_ *testing.T, c []*Comm) error {
				return eachRank(c, func(c *Comm) error {
					color := 0
					if c.Rank() == 0 {
						color = -5
					}
					_, err := c.Split(ctx, color, 0, Options{})
					return err
				})[0]
			}},
		{name: "shrink exclude", n: 2, is: collectives.ErrInvalidPeer, peer: -1, wantI: "Shrink: invalid peer: exclude[0]=5",
			fail: func(_ *testing.T, c []*Comm) error { _, err := c[0].Shrink(ctx, []int{5}, Options{}); return err }},
		{name: "registration close", n: 2, is: collectives.ErrInvalidArgument, peer: -1,
			want: "goccl: rank 0: test backend: unmap: invalid argument",
			opts: func(o *Options) { o.NewBackend = regFactory },
			fail: func(t *testing.T, c []*Comm) error {
				reg, err := c[0].Register(ctx, p, 256)
				require.NoError(t, err)
				return reg.Close(ctx)
			}},
		{name: "init setting", n: 2, is: collectives.ErrInvalidArgument, peer: -1,
			want: `goccl: rank 0: invalid argument: GOCCL_TIMEOUT="soon": want a duration such as 30s`,
			fail: func(_ *testing.T, _ []*Comm) error {
				_, err := InitAll(ctx, []int{0, 1}, Options{Backend: BackendHost, Env: map[string]string{"GOCCL_TIMEOUT": "soon"}, Logger: discardLogger()})
				return err
			}},
		{name: "init without a rank", n: 1, is: collectives.ErrInvalidArgument, peer: -1, noRnk: true,
			want: "goccl: invalid argument: rank=5 not in [0,2)",
			fail: func(t *testing.T, _ []*Comm) error {
				id, err := NewUniqueID()
				require.NoError(t, err)
				_, err = InitRank(ctx, id, 2, 5, Options{Backend: BackendHost, Env: map[string]string{}, Logger: discardLogger()})
				return err
			}},
		{name: "peer aborted", n: 3, is: ErrAborted, peer: 1,
			// The call that finds the abort explains it from the records.
			want: "goccl: rank 0: rank 1 failed: communicator aborted: called Abort: disk full; flight recorder: no rank is in a call; ranks 0-2 made no call yet",
			fail: func(t *testing.T, c []*Comm) error {
				c[1].Abort(errors.New("disk full"))
				waitFor(t, 20*time.Second, func() bool { return c[0].Err() != nil }, "rank 0 to learn of the abort")
				return AllReduceSlice(ctx, c[0], buf, buf, Sum)
			}},
		{name: "timeout", n: 2, is: ErrTimeout, peer: 1, wantI: "rank 1 failed: communicator aborted: timed out waiting for peer: host: rank 0 waited",
			opts: func(o *Options) { o.Timeout = time.Second },
			fail: func(_ *testing.T, c []*Comm) error { return AllReduceSlice(ctx, c[0], buf, buf, Sum) }},
		{name: "peer closed", n: 2, is: ErrPeerClosed, peer: 1, wantI: "rank 1 failed: communicator aborted: peer closed its communicator after call #0",
			fail: func(t *testing.T, c []*Comm) error {
				require.NoError(t, c[1].Close())
				waitFor(t, 20*time.Second, func() bool { return c[0].boot.hasClosed(1) }, "rank 1's goodbye")
				return AllReduceSlice(ctx, c[0], buf, buf, Sum)
			}},
		{name: "closed", n: 2, is: ErrClosed, peer: -1,
			want: "goccl: rank 0: communicator closed",
			fail: func(t *testing.T, c []*Comm) error {
				for _, err := range eachRank(c, func(c *Comm) error { return c.Close() }) {
					require.NoError(t, err)
				}
				return c[0].Send(ctx, p, 4, Float32, 1, 0)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Backend: BackendHost, Env: map[string]string{}, Logger: discardLogger(), HeartbeatInterval: testHeartbeat}
			if tc.opts != nil {
				tc.opts(&opts)
			}
			comms, err := InitAll(ctx, make([]int, tc.n), opts)
			require.NoError(t, err)
			t.Cleanup(func() {
				for _, c := range comms {
					_ = c.Close()
				}
			})
			err = tc.fail(t, comms)
			require.Error(t, err)
			text := err.Error()
			assert.Equal(t, 1, strings.Count(text, "goccl:"), "one goccl: in %q", text)
			if tc.noRnk {
				assert.Regexp(t, regexp.MustCompile(`^goccl: [^r]`), text)
			} else {
				assert.Regexp(t, regexp.MustCompile(`^goccl: rank 0: \S`), text)
			}
			if tc.want != "" {
				assert.Equal(t, tc.want, text)
			}
			assert.Contains(t, text, tc.wantI)
			require.ErrorIs(t, err, tc.is)
			var pe *PeerError
			if tc.peer < 0 {
				assert.False(t, errors.As(err, &pe), "no PeerError in %q", text)
				return
			}
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tc.peer, pe.Rank)
			assert.True(t, strings.HasPrefix(text, "goccl: rank 0: "+pe.Error()), "the PeerError's own text follows the prefix: %q", text)
			assert.NotContains(t, pe.Cause.Error(), "goccl:")
			assert.Equal(t, text, comms[0].Err().Error(), "Err says the same")
		})
	}
}

// regBackend registers, and its registrations fail to close.
type regBackend struct{ *fakeBackend }

func regFactory(context.Context, transport.Bootstrap, BackendConfig) (collectives.Backend, error) {
	return regBackend{newFake(false)}, nil
}

func (regBackend) Register(context.Context, uintptr, uint64) (collectives.Registration, error) {
	return failingReg{}, nil
}

func (regBackend) Alloc(context.Context, uint64) (uintptr, collectives.Registration, error) {
	return 0, failingReg{}, nil
}

type failingReg struct{}

func (failingReg) Close(context.Context) error {
	return fmt.Errorf("test backend: unmap: %w", collectives.ErrInvalidArgument)
}

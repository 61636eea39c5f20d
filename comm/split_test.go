package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/onheap"
)

// hostOpts are quick options on the real host backend.
func hostOpts() Options {
	return Options{Backend: BackendHost, Timeout: 30 * time.Second, HeartbeatInterval: testHeartbeat, Env: map[string]string{}, Logger: discardLogger()}
}

// closeComms closes children (nil entries skipped) on every rank at once:
// Close of a healthy host communicator is collective.
func closeComms(t *testing.T, comms []*Comm) {
	t.Helper()
	for r, err := range eachRank(comms, func(c *Comm) error {
		if c == nil {
			return nil
		}
		return c.Close()
	}) {
		require.NoError(t, err, "closing rank %d", r)
	}
}

// checkAllReduce runs one int64 sum on every comm of group (ranks in the
// group's order) with random inputs and checks every result against the
// sum computed here.
func checkAllReduce(t *testing.T, group []*Comm, count int) {
	t.Helper()
	n := len(group)
	in := make([][]int64, n)
	out := make([][]int64, n)
	for r := range group {
		require.Equal(t, r, group[r].Rank(), "group listed in rank order")
		require.Equal(t, n, group[r].Size())
		in[r] = make([]int64, count)
		out[r] = make([]int64, count)
		for i := range in[r] {
			in[r][i] = rand.Int64N(1 << 40)
			out[r][i] = -7 // poison
		}
	}
	errs := eachRank(group, func(c *Comm) error {
		r := c.Rank()
		return c.AllReduce(context.Background(), uintptr(unsafe.Pointer(&in[r][0])), uintptr(unsafe.Pointer(&out[r][0])), count, Int64, Sum, 0)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for i := 0; i < count; i++ {
		var want int64
		for r := range in {
			want += in[r][i]
		}
		for r := range out {
			require.Equal(t, want, out[r][i], "rank %d of %d element %d", r, n, i)
		}
	}
	runtime.KeepAlive(in)
}

// splitAll calls Split on every rank with colors[r], keys[r].
func splitAll(comms []*Comm, colors, keys []int, opts Options) ([]*Comm, []error) {
	kids := make([]*Comm, len(comms))
	errs := eachRank(comms, func(c *Comm) error {
		var err error
		kids[c.Rank()], err = c.Split(context.Background(), colors[c.Rank()], keys[c.Rank()], opts)
		return err
	})
	return kids, errs
}

// byColor lists the children of color in their new rank order.
func byColor(kids []*Comm, colors []int, color int) []*Comm {
	var g []*Comm
	for r, k := range kids {
		if colors[r] == color && k != nil {
			g = append(g, k)
		}
	}
	out := make([]*Comm, len(g))
	for _, k := range g {
		out[k.Rank()] = k
	}
	return out
}

func TestSplitOddEvenHost(t *testing.T) {
	comms := initGroup(t, 4, hostOpts())
	colors, keys := []int{0, 1, 0, 1}, []int{0, 0, 0, 0}
	kids, errs := splitAll(comms, colors, keys, Options{})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer closeComms(t, kids)
	for _, color := range []int{0, 1} {
		g := byColor(kids, colors, color)
		require.Len(t, g, 2)
		for _, count := range []int{1, 1000, 70001} {
			checkAllReduce(t, g, count)
		}
	}
	for r, k := range kids {
		assert.Equal(t, r/2, k.Rank(), "parent rank %d", r)
		assert.Equal(t, BackendHost, k.BackendName())
	}
	// The parent is untouched.
	checkAllReduce(t, comms, 333)
}

// Ranks are numbered by key, ties by parent rank; every child's
// bootstrap holds its members in that order.
func TestSplitKeyOrder(t *testing.T) {
	cases := []struct {
		name   string
		colors []int
		keys   []int
		want   []int // new rank of each parent rank
	}{
		{"keys reverse", []int{0, 0, 0, 0}, []int{3, 2, 1, 0}, []int{3, 2, 1, 0}},
		{"ties by parent rank", []int{0, 0, 0, 0}, []int{3, 1, 1, 0}, []int{3, 1, 2, 0}},
		{"negative keys", []int{5, 5, 9, 9}, []int{-1, -8, 100, -100}, []int{1, 0, 1, 0}},
		{"all equal", []int{2, 2, 2, 2}, []int{7, 7, 7, 7}, []int{0, 1, 2, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ff := &fakeFactory{}
			comms := initGroup(t, 4, testOpts(ff))
			kids, errs := splitAll(comms, tc.colors, tc.keys, Options{NewBackend: (&fakeFactory{}).New})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			defer closeComms(t, kids)
			members := make([][][]byte, len(kids))
			errs = eachRank(kids, func(k *Comm) error {
				var err error
				r := 0
				for i := range kids {
					if kids[i] == k {
						r = i
					}
				}
				members[r], err = k.Bootstrap().AllGather(context.Background(), binary.BigEndian.AppendUint32(nil, uint32(r)))
				return err
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r, k := range kids {
				assert.Equal(t, tc.want[r], k.Rank(), "parent rank %d", r)
				got := make([]int, k.Size())
				for i, b := range members[r] {
					got[i] = int(binary.BigEndian.Uint32(b))
				}
				for q, nr := range tc.want {
					if tc.colors[q] == tc.colors[r] {
						assert.Equal(t, q, got[nr], "child of color %d: new rank %d is parent rank %d", tc.colors[r], nr, q)
					}
				}
			}
		})
	}
}

func TestSplitNoColorAndOneRank(t *testing.T) {
	comms := initGroup(t, 4, hostOpts())
	// Rank 1 joins nothing; rank 3 is alone in its color; 0 and 2 pair.
	colors, keys := []int{4, NoColor, 4, 8}, []int{1, 0, 0, 0}
	kids, errs := splitAll(comms, colors, keys, Options{})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer closeComms(t, kids)
	assert.Nil(t, kids[1], "NoColor gives no communicator")
	checkAllReduce(t, []*Comm{kids[2], kids[0]}, 4097) // key 0 first
	require.Equal(t, 1, kids[3].Size())
	checkAllReduce(t, []*Comm{kids[3]}, 100)
	checkAllReduce(t, comms, 10)
}

func TestSplitBadArguments(t *testing.T) {
	cases := []struct {
		name string
		opts func(r int) Options
		col  func(r int) int
		want string
	}{
		{"color -2", func(int) Options { return Options{} }, func(r int) int {
			if r == 2 {
				return -2
			}
			return 0
		}, "color -2"},
		{"negative timeout", func(r int) Options {
			if r == 1 {
				return Options{Timeout: -time.Second}
			}
			return Options{}
		}, func(int) int { return 1 }, "Options.Timeout=-1s"},
		{"bad backend", func(r int) Options {
			if r == 0 {
				return Options{Backend: "cuda"}
			}
			return Options{}
		}, func(int) int { return 1 }, `Options.Backend="cuda"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ff := &fakeFactory{}
			comms := initGroup(t, 3, testOpts(ff))
			start := time.Now()
			errs := eachRank(comms, func(c *Comm) error {
				k, err := c.Split(context.Background(), tc.col(c.Rank()), 0, tc.opts(c.Rank()))
				if k != nil {
					return fmt.Errorf("a communicator was made: %v", k.Close())
				}
				return err
			})
			for r, err := range errs {
				require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
			}
			assert.Less(t, time.Since(start), 10*time.Second, "every rank fails at once, none waits for a timeout")
			// The parent goes on.
			for r, err := range eachRank(comms, func(c *Comm) error { return c.Bootstrap().Barrier(context.Background()) }) {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

func TestSplitNested(t *testing.T) {
	comms := initGroup(t, 4, hostOpts())
	// One child of all four, in reverse order.
	all, errs := splitAll(comms, []int{0, 0, 0, 0}, []int{3, 2, 1, 0}, Options{})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer closeComms(t, all)
	rev := byColor(all, []int{0, 0, 0, 0}, 0)
	checkAllReduce(t, rev, 5000)
	// Each contributes its parent rank: the gather lists them by key.
	got := make([][]int64, 4)
	errs = eachRank(all, func(k *Comm) error {
		parent := onheap.Slice([]int64{int64(slices.Index(all, k))})
		got[parent[0]] = []int64{-1, -1, -1, -1}
		return k.AllGather(context.Background(), uintptr(unsafe.Pointer(&parent[0])), uintptr(unsafe.Pointer(&got[parent[0]][0])), 1, Int64, 0)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		assert.Equal(t, []int64{3, 2, 1, 0}, got[r], "parent rank %d", r)
	}
	// Its odd and even ranks (by the child's numbering).
	colors := make([]int, 4)
	keys := make([]int, 4)
	for i, k := range rev {
		colors[i], keys[i] = k.Rank()%2, -k.Rank()
	}
	grand, errs := splitAll(rev, colors, keys, Options{})
	for r, err := range errs {
		require.NoError(t, err, "child rank %d", r)
	}
	defer closeComms(t, grand)
	for _, color := range []int{0, 1} {
		g := byColor(grand, colors, color)
		require.Len(t, g, 2)
		checkAllReduce(t, g, 3001)
	}
	// Grandchildren of child rank 3 and 1 (parent ranks 0 and 2): keys
	// -3 < -1, so child rank 3 is rank 0.
	assert.Equal(t, 0, grand[3].Rank())
	assert.Equal(t, 1, grand[1].Rank())
	// Each level is independent: closing the middle one leaves the others.
	closeComms(t, all)
	checkAllReduce(t, byColor(grand, colors, 1), 17)
	checkAllReduce(t, comms, 17)
}

func TestSplitIndependentLifetimes(t *testing.T) {
	comms := initGroup(t, 2, hostOpts())
	kids, errs := splitAll(comms, []int{0, 0}, []int{0, 0}, Options{})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	// Aborting the child leaves the parent alone.
	kids[1].Abort(errTest)
	require.ErrorIs(t, kids[1].Err(), ErrAborted)
	waitFor(t, 10*time.Second, func() bool { return kids[0].Err() != nil }, "the abort to reach the child's other rank")
	require.NoError(t, comms[0].Err())
	checkAllReduce(t, comms, 64)
	closeComms(t, kids)
	// And the other way round: a parent aborted, its child works.
	kids, errs = splitAll(comms, []int{0, 0}, []int{1, 0}, Options{})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	defer closeComms(t, kids)
	comms[0].Abort(errTest)
	waitFor(t, 10*time.Second, func() bool { return comms[1].Err() != nil }, "the parent's abort to spread")
	checkAllReduce(t, []*Comm{kids[1], kids[0]}, 64)
	_, err := comms[0].Split(context.Background(), 0, 0, Options{})
	require.ErrorIs(t, err, ErrAborted, "an aborted parent splits no more")
}

// Many Split/use/Close cycles give back every descriptor and goroutine.
func TestSplitCyclesLeakNothing(t *testing.T) {
	comms := initGroup(t, 2, hostOpts())
	cycle := func(i int) {
		kids, errs := splitAll(comms, []int{0, 0}, []int{i % 2, 0}, Options{})
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		checkAllReduce(t, byColor(kids, []int{0, 0}, 0), 32)
		closeComms(t, kids)
	}
	for i := 0; i < 3; i++ {
		cycle(i)
	}
	fds, gs := countFDs(t), runtime.NumGoroutine()
	const cycles = 40
	for i := 0; i < cycles; i++ {
		cycle(i)
	}
	waitFor(t, 10*time.Second, func() bool { return countFDs(t) <= fds && runtime.NumGoroutine() <= gs }, "descriptors and goroutines back to the baseline")
	t.Logf("%d cycles: fds %d -> %d, goroutines %d -> %d", cycles, fds, countFDs(t), gs, runtime.NumGoroutine())
}

func TestSplitRecordDecoding(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"a collective's check record", make([]byte, callRecordSize), "is not in Split"},
		{"an offer", append([]byte(splitOfferTag), 1), "another step of Split"},
		{"short", []byte("GSP1"), "is not in Split"},
		{"bad flag", append(encodeSplitRecord(1, 2, nil)[:20], 7), "flag 7"},
		{"color below NoColor", encodeSplitRecord(-3, 0, nil), "color -3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeSplitRecord(tc.b)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	r, err := decodeSplitRecord(encodeSplitRecord(-1, -99, nil))
	require.NoError(t, err)
	assert.Equal(t, splitRecord{color: -1, key: -99}, r)
}

// Under GOCCL_CHECK a rank in Split while another is in a collective: both
// fail at once with errors that say so, and the parent stays in step.
func TestSplitAgainstCollectiveUnderCheck(t *testing.T) {
	ff := &fakeFactory{}
	opts := testOpts(ff)
	opts.Check = true
	comms := initGroup(t, 2, opts)
	errs := eachRank(comms, func(c *Comm) error {
		if c.Rank() == 0 {
			k, err := c.Split(context.Background(), 0, 0, Options{})
			if k != nil {
				return fmt.Errorf("a communicator was made: %v", k.Close())
			}
			return err
		}
		return c.AllReduce(context.Background(), 8, 8, 1, Float32, Sum, 0)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	assert.Contains(t, errs[0].Error(), "rank 1: is not in Split")
	require.Error(t, errs[1])
	assert.Contains(t, errs[1].Error(), "GOCCL_CHECK: rank 0")
	assert.Equal(t, 0, ff.get(1).runCount(), "the collective launched nothing")
	for r, err := range eachRank(comms, func(c *Comm) error { return c.Bootstrap().Barrier(context.Background()) }) {
		require.NoError(t, err, "rank %d", r)
	}
}

package comm

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// kill makes rank r of comms look dead to the others: its communicator
// is aborted and closed, so its connections and rescue listener are gone.
func kill(t *testing.T, comms []*Comm, r int) {
	t.Helper()
	comms[r].Abort(errors.New("killed by the test"))
	require.NoError(t, comms[r].Close())
	for q, c := range comms {
		if q != r {
			waitFor(t, 10*time.Second, func() bool { return c.Err() != nil }, "the survivors to see the failure")
		}
	}
}

// shrinkAll calls Shrink on the ranks of who with exclude[r] and returns
// the children (by parent rank) and errors.
func shrinkAll(comms []*Comm, who []int, exclude map[int][]int, opts Options) ([]*Comm, []error) {
	kids := make([]*Comm, len(comms))
	errs := make([]error, len(comms))
	part := make([]*Comm, len(who))
	for i, r := range who {
		part[i] = comms[r]
	}
	e := eachRank(part, func(c *Comm) error {
		var err error
		kids[c.Rank()], err = c.Shrink(context.Background(), exclude[c.Rank()], opts)
		return err
	})
	for i, r := range who {
		errs[r] = e[i]
	}
	return kids, errs
}

func same(ex []int, who ...int) map[int][]int {
	m := map[int][]int{}
	for _, r := range who {
		m[r] = ex
	}
	return m
}

func TestShrinkAfterDeath(t *testing.T) {
	for _, victim := range []int{0, 1, 3} {
		t.Run("victim="+string(rune('0'+victim)), func(t *testing.T) {
			comms := initGroup(t, 4, hostOpts())
			kill(t, comms, victim)
			var who []int
			for r := range comms {
				if r != victim {
					who = append(who, r)
				}
			}
			kids, errs := shrinkAll(comms, who, same([]int{victim}, who...), Options{})
			for _, r := range who {
				require.NoError(t, errs[r], "rank %d", r)
			}
			group := make([]*Comm, 0, 3)
			for i, r := range who {
				assert.Equal(t, i, kids[r].Rank(), "survivors numbered in parent order")
				group = append(group, kids[r])
			}
			checkAllReduce(t, group, 1)
			checkAllReduce(t, group, 100003)
			closeComms(t, group)
		})
	}
}

// Shrink on a healthy communicator leaves out a live rank, which does not
// call it; the parent stays usable by everyone.
func TestShrinkHealthyParent(t *testing.T) {
	comms := initGroup(t, 4, hostOpts())
	kids, errs := shrinkAll(comms, []int{0, 2, 3}, same([]int{1}, 0, 2, 3), Options{})
	for _, r := range []int{0, 2, 3} {
		require.NoError(t, errs[r], "rank %d", r)
	}
	g := []*Comm{kids[0], kids[2], kids[3]}
	checkAllReduce(t, g, 999)
	checkAllReduce(t, comms, 999)
	// Shrink again (the exclude list in another order) and shrink the child.
	again, errs := shrinkAll(comms, []int{0, 2}, same([]int{3, 1}, 0, 2), Options{})
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	checkAllReduce(t, []*Comm{again[0], again[2]}, 50)
	grand, errs := shrinkAll(g, []int{1, 2}, same([]int{0}, 1, 2), Options{})
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	checkAllReduce(t, []*Comm{grand[1], grand[2]}, 50)
	// To one rank.
	one, err := kids[3].Shrink(context.Background(), []int{0, 1}, Options{})
	require.NoError(t, err)
	checkAllReduce(t, []*Comm{one}, 5)
	closeComms(t, []*Comm{one})
	closeComms(t, []*Comm{grand[1], grand[2]})
	closeComms(t, []*Comm{again[0], again[2]})
	closeComms(t, g)
}

func TestShrinkBadExclude(t *testing.T) {
	ff := &fakeFactory{}
	comms := initGroup(t, 4, testOpts(ff))
	c := comms[1]
	cases := []struct {
		name    string
		exclude []int
		is      error
		want    string
	}{
		{"unknown rank", []int{0, 4}, collectives.ErrInvalidPeer, "exclude[1]=4 is not a rank of this communicator (ranks 0..3)"},
		{"negative", []int{-1}, collectives.ErrInvalidPeer, "exclude[0]=-1 is not a rank"},
		{"self", []int{2, 1}, collectives.ErrInvalidPeer, "exclude[1]=1 is this rank"},
		{"duplicate", []int{3, 0, 3}, collectives.ErrInvalidArgument, "exclude[2]=3 repeats exclude[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := c.Shrink(context.Background(), tc.exclude, Options{})
			require.Nil(t, k)
			require.ErrorIs(t, err, tc.is)
			require.ErrorIs(t, err, collectives.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := c.Shrink(context.Background(), nil, Options{HeartbeatInterval: -1})
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "Options.HeartbeatInterval")
	require.NoError(t, c.Err(), "nothing happened to the communicator")
}

// Survivors that disagree fail with an error naming both lists, or the
// rank that did, well before the timeout: none waits for it.
func TestShrinkDisagreement(t *testing.T) {
	cases := []struct {
		name    string
		dead    int // closed before the Shrink; -1 for none
		who     []int
		exclude map[int][]int
		is      error  // what every caller's error wraps
		want    string // in every caller's error
	}{
		{"a follower names more", -1, []int{0, 1, 2}, map[int][]int{0: {3}, 1: {3}, 2: {1, 3}}, nil, "exclude"},
		{"a follower names another lowest survivor", -1, []int{0, 1, 2}, map[int][]int{0: {3}, 1: {3}, 2: {0, 3}}, nil, "exclude"},
		{"the lowest survivor names more", -1, []int{0, 1, 2}, map[int][]int{0: {2, 3}, 1: {3}, 2: {3}}, nil, "exclude"},
		{"dead lowest rank not excluded", 0, []int{1, 2, 3}, same(nil, 1, 2, 3), nil, "rank 0 failed"},
		{"dead follower not excluded", 2, []int{0, 1, 3}, same(nil, 0, 1, 3), nil, "rank 2 failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms := initGroup(t, 4, testOpts(&fakeFactory{}))
			if tc.dead >= 0 {
				kill(t, comms, tc.dead)
			}
			start := time.Now()
			kids, errs := shrinkAll(comms, tc.who, tc.exclude, Options{Timeout: 60 * time.Second})
			took := time.Since(start)
			for _, r := range tc.who {
				assert.Nil(t, kids[r], "rank %d", r)
				require.Error(t, errs[r], "rank %d", r)
				assert.NotErrorIs(t, errs[r], collectives.ErrTimeout, "rank %d: %v", r, errs[r])
				assert.Contains(t, errs[r].Error(), tc.want, "rank %d", r)
				t.Logf("rank %d: %v", r, errs[r])
			}
			assert.Less(t, took, 20*time.Second, "every survivor fails long before the 60 s timeout")
			t.Logf("every survivor failed within %v", took)
		})
	}
}

// A survivor that never calls Shrink is waited for until the timeout, and
// every caller says which rank is missing.
func TestShrinkMissingSurvivorTimesOut(t *testing.T) {
	comms := initGroup(t, 3, testOpts(&fakeFactory{}))
	_, errs := shrinkAll(comms, []int{0, 1}, same(nil, 0, 1), Options{Timeout: 2 * time.Second})
	for _, r := range []int{0, 1} {
		require.ErrorIs(t, errs[r], collectives.ErrTimeout, "rank %d", r)
		assert.Contains(t, errs[r].Error(), "ranks [2] did not join the Shrink", "rank %d", r)
	}
}

// Shrink/Close cycles give back every descriptor and goroutine, and a
// Shrink after a failed one works.
func TestShrinkCyclesLeakNothing(t *testing.T) {
	comms := initGroup(t, 3, hostOpts())
	cycle := func() {
		kids, errs := shrinkAll(comms, []int{0, 2}, same([]int{1}, 0, 2), Options{})
		require.NoError(t, errs[0])
		require.NoError(t, errs[2])
		checkAllReduce(t, []*Comm{kids[0], kids[2]}, 16)
		closeComms(t, []*Comm{kids[0], kids[2]})
	}
	cycle()
	// A failed attempt (the lists differ) leaves nothing in the way.
	_, errs := shrinkAll(comms, []int{0, 2}, map[int][]int{0: {1}, 2: nil}, Options{})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorIs(t, errs[2], ErrMismatch)
	cycle()
	fds, gs := countFDs(t), runtime.NumGoroutine()
	const cycles = 30
	for i := 0; i < cycles; i++ {
		cycle()
	}
	waitFor(t, 10*time.Second, func() bool { return countFDs(t) <= fds && runtime.NumGoroutine() <= gs }, "descriptors and goroutines back to the baseline")
	t.Logf("%d cycles: fds %d -> %d, goroutines %d -> %d", cycles, fds, countFDs(t), gs, runtime.NumGoroutine())
}

func TestShrinkOpenDecoding(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
	}{
		{"short", []byte{roleJoin, 0, 0}},
		{"bad role", encodeShrinkOpen(9, nil)},
		{"too many", encodeShrinkOpen(roleJoin, []int{0, 1, 2, 3})},
		{"unsorted", encodeShrinkOpen(roleJoin, []int{2, 1})},
		{"out of range", encodeShrinkOpen(roleProbe, []int{7})},
		{"trailing", append(encodeShrinkOpen(roleJoin, []int{1}), 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeShrinkOpen(tc.b, 4)
			require.ErrorIs(t, err, errMalformed)
		})
	}
	role, ex, err := decodeShrinkOpen(encodeShrinkOpen(roleProbe, []int{0, 3}), 4)
	require.NoError(t, err)
	assert.Equal(t, byte(roleProbe), role)
	assert.Equal(t, []int{0, 3}, ex)
}

// A survivor that calls Shrink after the lowest survivor gave up hears
// why at once instead of waiting in its listener's queue; a later Shrink
// with the right list then works.
func TestShrinkLateSurvivorHearsVerdict(t *testing.T) {
	comms := initGroup(t, 4, hostOpts())
	kill(t, comms, 2)
	opts := Options{Timeout: 60 * time.Second}
	_, errs := shrinkAll(comms, []int{0, 1}, same(nil, 0, 1), opts)
	require.ErrorContains(t, errs[0], "rank 2 failed")
	require.ErrorContains(t, errs[1], "rank 2 failed")
	start := time.Now()
	_, err := comms[3].Shrink(context.Background(), nil, opts)
	require.ErrorContains(t, err, "rank 2 failed")
	assert.NotErrorIs(t, err, collectives.ErrTimeout)
	assert.Less(t, time.Since(start), 20*time.Second)
	kids, errs := shrinkAll(comms, []int{0, 1, 3}, same([]int{2}, 0, 1, 3), opts)
	for _, r := range []int{0, 1, 3} {
		require.NoError(t, errs[r], "rank %d", r)
	}
	g := []*Comm{kids[0], kids[1], kids[3]}
	checkAllReduce(t, g, 4099)
	closeComms(t, g)
}

// Strangers on the rescue listeners (garbage, a wrong magic, a silent
// connection, a forged pid) are dropped and do not disturb a Shrink.
func TestShrinkStrangersDropped(t *testing.T) {
	comms := initGroup(t, 3, hostOpts())
	kill(t, comms, 2)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	forged := encodeHello(hello{Magic: comms[0].rescue.magic, Version: protocolVersion, NRanks: 3, Rank: 1, PID: 1})
	wrong := encodeHello(hello{Magic: comms[0].rescue.magic ^ 1, Version: protocolVersion, NRanks: 3, Rank: 1, PID: uint32(os.Getpid())})
	for _, addr := range comms[0].rescue.addrs[:2] {
		for _, b := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), forged[:], wrong[:], nil} {
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			held = append(held, conn)
			if b != nil {
				_, err = conn.Write(b)
				require.NoError(t, err)
			}
		}
	}
	kids, errs := shrinkAll(comms, []int{0, 1}, same([]int{2}, 0, 1), Options{})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	checkAllReduce(t, []*Comm{kids[0], kids[1]}, 777)
	closeComms(t, []*Comm{kids[0], kids[1]})
}

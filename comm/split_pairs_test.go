package comm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpSockets counts this process's TCP sockets that listen and those
// that are connected (from /proc/self/fd and /proc/net/tcp{,6}).
func tcpSockets(t *testing.T) (listening, connected int) {
	t.Helper()
	state := map[string]string{} // inode -> state
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) > 9 && fs[0] != "sl" {
				state[fs[9]] = fs[3]
			}
		}
		require.NoError(t, f.Close())
	}
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		switch state[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
		case "0A":
			listening++
		case "01":
			connected++
		}
	}
	return listening, connected
}

// A Split on one node dials no TCP connection and opens no listener (the
// children's rescue points share their parents' listeners); its children
// work, and closing them gives back every socket.
func TestSplitOnOneNodeDialsNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		colors []int
	}{
		{"two colors", []int{0, 1, 0, 1}},
		{"one color", []int{0, 0, 0, 0}},
		{"one alone", []int{0, 1, 1, NoColor}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := initGroup(t, len(tc.colors), hostOpts())
			l0, c0 := tcpSockets(t)
			require.Positive(t, c0, "the parent's star is counted")
			kids, errs := splitAll(comms, tc.colors, []int{3, 2, 1, 0}, Options{})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			l1, c1 := tcpSockets(t)
			assert.Equal(t, c0, c1, "TCP connections before and after Split")
			// The children's rescue points share the parents' listeners.
			assert.Equal(t, l0, l1, "TCP listeners before and after Split")
			for _, color := range []int{0, 1} {
				if g := byColor(kids, tc.colors, color); len(g) > 0 {
					checkAllReduce(t, g, 33)
				}
			}
			closeComms(t, kids)
			waitFor(t, 10e9, func() bool { l, c := tcpSockets(t); return l == l0 && c == c0 }, "the children's sockets to close")
			checkAllReduce(t, comms, 5)
		})
	}
}

// Either side of a Split outlives the other, in both orders, and a child
// splits again after its parent is gone.
func TestSplitParentAndChildCloseInEitherOrder(t *testing.T) {
	for _, parentFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("parent first %v", parentFirst), func(t *testing.T) {
			comms, err := InitAll(context.Background(), make([]int, 4), hostOpts())
			require.NoError(t, err)
			colors := []int{0, 0, 1, 1}
			kids, errs := splitAll(comms, colors, []int{1, 0, 0, 1}, Options{})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			if !parentFirst {
				closeComms(t, kids)
				checkAllReduce(t, comms, 19)
				closeComms(t, comms)
				return
			}
			closeComms(t, comms)
			for _, color := range []int{0, 1} {
				g := byColor(kids, colors, color)
				checkAllReduce(t, g, 19)
				// Nested: the child of a closed parent splits in turn.
				grand, errs := splitAll(g, []int{0, 0}, []int{1, 0}, Options{})
				for r, err := range errs {
					require.NoError(t, err, "color %d rank %d", color, r)
				}
				checkAllReduce(t, []*Comm{grand[1], grand[0]}, 7)
				closeComms(t, grand)
				checkAllReduce(t, g, 3)
			}
			closeComms(t, kids)
		})
	}
}

// A child's Shrink finds its survivors, before and after the parent is
// closed; the parent's own Shrink is not disturbed by the child.
func TestShrinkOfSplitChild(t *testing.T) {
	for _, parentClosed := range []bool{false, true} {
		t.Run(fmt.Sprintf("parent closed %v", parentClosed), func(t *testing.T) {
			comms, err := InitAll(context.Background(), make([]int, 4), hostOpts())
			require.NoError(t, err)
			l0, _ := tcpSockets(t)
			kids, errs := splitAll(comms, []int{0, 0, 0, 0}, []int{0, 1, 2, 3}, Options{})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			if parentClosed {
				closeComms(t, comms)
			} else {
				// The parent leaves out rank 1 while the child lives.
				p, errs := shrinkAll(comms, []int{0, 2, 3}, same([]int{1}, 0, 2, 3), Options{})
				for _, r := range []int{0, 2, 3} {
					require.NoError(t, errs[r], "rank %d", r)
				}
				checkAllReduce(t, []*Comm{p[0], p[2], p[3]}, 11)
				closeComms(t, []*Comm{p[0], p[2], p[3]})
			}
			kill(t, kids, 2)
			grand, errs := shrinkAll(kids, []int{0, 1, 3}, same([]int{2}, 0, 1, 3), Options{})
			for _, r := range []int{0, 1, 3} {
				require.NoError(t, errs[r], "rank %d", r)
			}
			checkAllReduce(t, []*Comm{grand[0], grand[1], grand[3]}, 1001)
			closeComms(t, []*Comm{grand[0], grand[1], grand[3]})
			closeComms(t, []*Comm{kids[0], kids[1], kids[3]})
			if !parentClosed {
				l1, _ := tcpSockets(t)
				assert.Equal(t, l0, l1, "the children's listeners are gone, the parents' stay")
				checkAllReduce(t, comms, 3)
				closeComms(t, comms)
			}
		})
	}
}

// Children of Split and of Shrink open no listener: their rescue points
// share the one each rank's first communicator opened, which lives until
// the last communicator on it closes, in whichever order, and serves every
// Shrink meanwhile.
func TestChildrenShareTheRescueListener(t *testing.T) {
	for _, parentFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("parent first %v", parentFirst), func(t *testing.T) {
			lBefore, _ := tcpSockets(t)
			comms := initGroup(t, 4, hostOpts())
			l0, _ := tcpSockets(t)
			require.Equal(t, lBefore+4, l0, "one rescue listener per rank")
			kids, errs := splitAll(comms, []int{0, 0, 0, 0}, []int{3, 2, 1, 0}, Options{})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			// Kids by parent rank; child rank 0 is parent rank 3. Leave
			// parent rank 0 (child rank 3) out.
			shrunk, errs := shrinkAll(kids, []int{3, 2, 1}, same([]int{3}, 0, 1, 2), Options{})
			for _, r := range []int{0, 1, 2} {
				require.NoError(t, errs[r], "child rank %d", r)
			}
			l, _ := tcpSockets(t)
			assert.Equal(t, l0, l, "listeners after Split and Shrink")
			g := []*Comm{shrunk[0], shrunk[1], shrunk[2]}
			checkAllReduce(t, g, 129)
			if parentFirst {
				closeComms(t, comms)
				l, _ = tcpSockets(t)
				assert.Equal(t, l0, l, "the children hold the listeners once the parents closed")
				// The Shrink child shrinks again, with the parents gone.
				again, errs := shrinkAll(g, []int{0, 2}, same([]int{1}, 0, 2), Options{})
				require.NoError(t, errs[0])
				require.NoError(t, errs[2])
				checkAllReduce(t, []*Comm{again[0], again[2]}, 77)
				closeComms(t, []*Comm{again[0], again[2]})
				closeComms(t, g)
				closeComms(t, kids)
			} else {
				closeComms(t, g)
				closeComms(t, kids)
				l, _ = tcpSockets(t)
				assert.Equal(t, l0, l, "the parents keep their listeners once the children closed")
				// The parent shrinks, its children gone.
				p, errs := shrinkAll(comms, []int{0, 1, 3}, same([]int{2}, 0, 1, 3), Options{})
				for _, r := range []int{0, 1, 3} {
					require.NoError(t, errs[r], "rank %d", r)
				}
				checkAllReduce(t, []*Comm{p[0], p[1], p[3]}, 55)
				closeComms(t, []*Comm{p[0], p[1], p[3]})
				closeComms(t, comms)
			}
			waitFor(t, 10e9, func() bool { l, _ := tcpSockets(t); return l == lBefore }, "every listener to close")
		})
	}
}

package gpu

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// liveDriver is the fake driver with flag writes that land at once in
// memory every rank shares, and streams whose value waits and copies to
// the host run when StreamQuery asks: enough for the check, whose host
// waits for the peers' offers while the ranks enqueue concurrently.
type liveDriver struct {
	*fakeDriver
	mem     *liveMem
	pending map[cuda.Stream][]fakeOp
}

type liveMem struct {
	mu sync.Mutex
	m  *simMem
}

func (d *liveDriver) StreamWriteValue32(c cuda.Context, s cuda.Stream, addr cuda.DevicePtr, v uint32) error {
	if err := d.fakeDriver.StreamWriteValue32(c, s, addr, v); err != nil {
		return err
	}
	d.mem.mu.Lock()
	defer d.mem.mu.Unlock()
	d.mem.m.write(uintptr(addr), binary.LittleEndian.AppendUint32(nil, v))
	return nil
}

func (d *liveDriver) StreamWaitValue32(c cuda.Context, s cuda.Stream, addr cuda.DevicePtr, v uint32, geq bool) error {
	if err := d.fakeDriver.StreamWaitValue32(c, s, addr, v, geq); err != nil {
		return err
	}
	d.queue(fakeOp{kind: "wait", stream: s, dst: uintptr(addr), val: v, geq: geq})
	return nil
}

func (d *liveDriver) MemcpyDtoHAsync(c cuda.Context, dst unsafe.Pointer, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	if err := d.fakeDriver.MemcpyDtoHAsync(c, dst, src, n, s); err != nil {
		return err
	}
	d.queue(fakeOp{kind: "dtoh", stream: s, src: uintptr(src), n: n, host: unsafe.Slice((*byte)(dst), n)})
	return nil
}

func (d *liveDriver) queue(o fakeOp) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending[o.stream] = append(d.pending[o.stream], o)
}

// StreamQuery runs s's queued waits and reads as far as the memory lets.
func (d *liveDriver) StreamQuery(_ cuda.Context, s cuda.Stream) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem.mu.Lock()
	defer d.mem.mu.Unlock()
	q := d.pending[s]
	for len(q) > 0 {
		o := q[0]
		if o.kind == "wait" && int32(d.mem.m.u32(o.dst)-o.val) < 0 {
			break
		}
		if o.kind == "dtoh" {
			d.mem.m.read(o.src, o.host)
		}
		q = q[1:]
	}
	d.pending[s] = q
	return len(q) == 0, nil
}

// newLiveBackends builds n checking backends over live drivers.
func newLiveBackends(t *testing.T, n int) ([]*Backend, []*fakeDriver) {
	t.Helper()
	return newLiveBackendsWith(t, n, Config{Check: true})
}

// newLiveBackendsWith is newLiveBackends with cfg (its Device set per rank).
func newLiveBackendsWith(t *testing.T, n int, cfg Config) ([]*Backend, []*fakeDriver) {
	t.Helper()
	mem := &liveMem{m: newSimMem()}
	g := transporttest.NewGroup(n)
	bes := make([]*Backend, n)
	drvs := make([]*fakeDriver, n)
	require.NoError(t, g.Run(func(rank int, b transport.Bootstrap) error {
		drvs[rank] = newFakeDriver()
		live := &liveDriver{fakeDriver: drvs[rank], mem: mem, pending: map[cuda.Stream][]fakeOp{}}
		mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
			return &fakeMapper{b: b}, nil
		}
		c := cfg
		c.Device = rank
		be, err := newBackend(context.Background(), live, b, c, []byte("fatbin"), mk)
		bes[rank] = be
		return err
	}))
	return bes, drvs
}

// runChecked runs every rank's group concurrently (the check waits for the
// peers' offers).
func runChecked(bes []*Backend, group func(r int) collectives.Group) []error {
	return together(len(bes), func(r int) error {
		g := group(r)
		return bes[r].RunGroup(context.Background(), &g)
	})
}

func TestP2PCECheckPassesMatchingOps(t *testing.T) {
	pceAt1MiB(t)
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			bes, drvs := newLiveBackends(t, n)
			const size = 1 << 20
			allocAll(t, bes, uint64(n)*size)
			for call := uint32(1); call <= 3; call++ {
				forgetOps(drvs)
				for _, d := range drvs {
					d.launches = nil
				}
				for r, err := range runChecked(bes, func(r int) collectives.Group {
					g, _ := ringGroups(n, size)(int(call), r)
					// A kernel op with each neighbour too: it offers as well.
					g.P2P = append(g.P2P,
						send((r+1)%n, rankAddr(sendBase, r), 8, collectives.Int8),
						recv((r+n-1)%n, rankAddr(sendBase, r)+64, 8, collectives.Int8))
					return g
				}) {
					require.NoError(t, err, "rank %d call %d", r, call)
				}
				for me := range bes {
					next := (me + 1) % n
					// The Send's offer into next's tx ring, slot (me, n%8):
					// its number cleared, offset me*size, bytes, its number.
					at := rankAddr(wsBase, next) + 0x9100 + 256 + 1024 + uintptr(me*8+int(2*call-1)%8)*16
					want := []fakeOp{
						{kind: "write", stream: userStream, dst: at, val: 0},
						{kind: "write", stream: userStream, dst: at + 4, val: 1 | uint32(uint64(me*size)>>32)<<1},
						{kind: "write", stream: userStream, dst: at + 8, val: uint32(me * size)},
						{kind: "write", stream: userStream, dst: at + 12, val: size},
						{kind: "write", stream: userStream, dst: at, val: 2*call - 1},
					}
					ops := drvs[me].opsOf()
					if call%2 == 1 { // the Recv first in the group (ringGroups), its offer first
						ops = ops[len(want):]
					}
					assert.Equal(t, want, ops[:len(want)], "rank %d call %d", me, call)
					assert.Len(t, drvs[me].opsOf("copy"), 1, "rank %d: the copy went", me)
					assert.Equal(t, 1, len(drvs[me].launches), "rank %d: the kernel's ops", me)
				}
			}
		})
	}
}

func TestP2PCECheckFailsBothSidesOfAMismatch(t *testing.T) {
	pceAt1MiB(t)
	const size = 1 << 20
	cases := []struct {
		name string
		// rank 1's Recv from rank 0 (rank 0 Sends its slot 0, size bytes).
		recvAt func(reg uintptr) uintptr
		count  int
		want   []string // in both ranks' errors
	}{
		{"another offset", func(reg uintptr) uintptr { return reg + size }, size,
			[]string{"rank 0's Send 1 to rank 1 takes the copy engines at offset 0x0", "rank 1's matching Recv from rank 0 takes the copy engines at offset 0x100000"}},
		{"another count", func(reg uintptr) uintptr { return reg }, size + 16,
			[]string{"with 1048576 bytes", "with 1048592 bytes"}},
		{"unregistered receiver", func(uintptr) uintptr { return rankAddr(sendBase, 1) }, size,
			[]string{"rank 0's Send 1 to rank 1 takes the copy engines", "rank 1's matching Recv from rank 0 takes the kernels"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bes, drvs := newLiveBackends(t, 2)
			regs, _ := allocAll(t, bes, 4*size)
			forgetOps(drvs)
			errs := runChecked(bes, func(r int) collectives.Group {
				if r == 0 {
					return collectives.Group{P2P: []collectives.P2P{send(1, regs[0], size, collectives.Int8)}}
				}
				return collectives.Group{P2P: []collectives.P2P{recv(0, c.recvAt(regs[1]), c.count, collectives.Int8)}}
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				require.ErrorIs(t, err, ErrNotSymmetric, "rank %d", r)
				require.ErrorIs(t, err, collectives.ErrAborted, "rank %d: the pair's numbers are spent", r)
				for _, w := range c.want {
					assert.Contains(t, err.Error(), w, "rank %d", r)
				}
				assert.Empty(t, drvs[r].opsOf("copy"), "rank %d: nothing moved", r)
				assert.Zero(t, len(drvs[r].launches), "rank %d: nothing launched", r)
				for _, o := range drvs[r].opsOf("write") {
					assert.False(t, o.dst >= pceReady(1-r, 0) && o.dst < pceReady(1-r, 0)+256, "rank %d: no ready or done written", r)
				}
			}
		})
	}
}

// A group with more ops to one peer than the offers' ring overwrites its
// own first offers: those go unverified, the rest are checked, nothing
// fails or hangs.
func TestP2PCECheckLongGroups(t *testing.T) {
	pceAt1MiB(t)
	const size, ops = 1 << 20, pceRing + 3
	bes, drvs := newLiveBackends(t, 2)
	allocAll(t, bes, ops*size)
	forgetOps(drvs)
	for r, err := range runChecked(bes, func(r int) collectives.Group {
		var g collectives.Group
		for i := range ops {
			if r == 0 {
				g.P2P = append(g.P2P, send(1, slotOf(regBase0, 0, i, size), size, collectives.Int8))
			} else {
				g.P2P = append(g.P2P, recv(0, slotOf(regBase0, 1, i, size), size, collectives.Int8))
			}
		}
		return g
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Len(t, drvs[0].opsOf("copy"), ops)
}

func TestP2PCECheckWaitEnds(t *testing.T) {
	pceAt1MiB(t)
	const size = 1 << 20
	group := collectives.Group{P2P: []collectives.P2P{send(1, rankAddr(regBase0, 0), size, collectives.Int8)}}
	t.Run("abort", func(t *testing.T) {
		bes, _ := newLiveBackends(t, 2)
		allocAll(t, bes, size)
		cause := fmt.Errorf("rank 1 is gone")
		go func() {
			time.Sleep(20 * time.Millisecond)
			bes[0].Abort(cause)
		}()
		g := group
		err := bes[0].RunGroup(context.Background(), &g) // rank 1 never offers
		require.ErrorIs(t, err, collectives.ErrAborted)
		require.ErrorIs(t, err, cause)
	})
	t.Run("GOCCL_TIMEOUT", func(t *testing.T) {
		bes, _ := newLiveBackendsWith(t, 2, Config{Check: true, Timeout: 30 * time.Millisecond})
		allocAll(t, bes, size)
		g := group
		err := bes[0].RunGroup(context.Background(), &g)
		require.ErrorIs(t, err, collectives.ErrTimeout)
		require.ErrorIs(t, err, collectives.ErrAborted, "the peer may wait for this rank: the communicator stops")
		require.ErrorContains(t, err, "offers of the matching Sends and Recvs of ranks [1]")
	})
	t.Run("context", func(t *testing.T) {
		bes, _ := newLiveBackends(t, 2)
		allocAll(t, bes, size)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		g := group
		err := bes[0].RunGroup(ctx, &g)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, collectives.ErrAborted, "the peer may wait for this rank: the communicator stops")
	})
}

func TestP2PCECheckMustBeAlike(t *testing.T) {
	for _, c := range []struct {
		tune    string
		refused bool
	}{{"p2pce=1M", true}, {"", false}} {
		t.Run(fmt.Sprintf("%q", c.tune), func(t *testing.T) {
			t.Setenv(EnvTune, c.tune)
			g := transporttest.NewGroup(2)
			errs := make([]error, 2)
			_ = g.Run(func(rank int, b transport.Bootstrap) error {
				mk := func(_ context.Context, _ string, _ cuda.Driver, b transport.Bootstrap, _ cuda.Device, _ cuda.Context) (transport.Mapper, error) {
					return &fakeMapper{b: b}, nil
				}
				be, err := newBackend(context.Background(), newFakeDriver(), b, Config{Device: rank, Check: rank == 1}, []byte("fatbin"), mk)
				if err == nil {
					errs[rank] = be.Close()
					return nil
				}
				errs[rank] = err
				return nil
			})
			for r, err := range errs {
				if !c.refused {
					require.NoError(t, err, "rank %d: the copy-engine point-to-point path is off, the check exchanges nothing", r)
					continue
				}
				require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
				assert.Contains(t, err.Error(), "GOCCL_CHECK", "rank %d", r)
			}
		})
	}
}

// An offer carries the path, the offset below 2^47 and the bytes below
// 2^48 whole: counts 4 GiB apart, or offsets, do not compare equal.
func TestP2PCEOfferFields(t *testing.T) {
	for _, x := range []pceOp{
		{n: 7, ce: true, off: 0x1234_5678_9abc, bytes: 5<<32 | 17},
		{n: 1, ce: true, off: 0, bytes: 1 << 20},
		{n: 9, ce: false, off: 0x40, bytes: 0xffff_ffff_ffff},
	} {
		ce, off, bytes := pceOfferFields(pceOffer(&x))
		wantOff := x.off
		if !x.ce {
			wantOff = 0 // the kernels' ops offer no offset
		}
		assert.Equal(t, []any{x.ce, wantOff, x.bytes}, []any{ce, off, bytes}, "%+v", x)
	}
	be := &Backend{rank: 0}
	mine := pceOp{n: 3, peer: 1, send: true, ce: true, off: 0x1000, bytes: 1 << 20}
	for _, tc := range []struct {
		name  string
		their pceOp
		ok    bool
	}{
		{"alike", pceOp{n: 3, ce: true, off: 0x1000, bytes: 1 << 20}, true},
		{"4 GiB more", pceOp{n: 3, ce: true, off: 0x1000, bytes: 1<<32 + 1<<20}, false},
		{"offset 2^32 apart", pceOp{n: 3, ce: true, off: 1<<32 + 0x1000, bytes: 1 << 20}, false},
		{"the kernels", pceOp{n: 3, ce: false, bytes: 1 << 20}, false},
	} {
		err := be.pceCompare(&mine, pceOffer(&tc.their))
		if tc.ok {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorIs(t, err, ErrNotSymmetric, tc.name)
		}
	}
}

// TestP2PCEOfferReadIsNeverTorn runs every interleaving of an offer's
// writes over the slot's last offer (pceOfferWrites) with a reader of
// either, as pceReadOffers reads: its wait for the number, the four
// words in any order (a copy's order is the engine's), the number again.
// A read that ends on its own number has that offer's words, whatever
// the interleaving; and a read not overlapped by the writes verifies.
func TestP2PCEOfferReadIsNeverTorn(t *testing.T) {
	old := pceOffer(&pceOp{n: 3, ce: true, off: 0x1000, bytes: 4096})
	next := pceOffer(&pceOp{n: 3 + pceRing, ce: false, bytes: 1 << 40})
	writes := pceOfferWrites(next)
	perms := permutations([]int{0, 1, 2, 3})
	for _, want := range [][4]uint32{old, next} {
		verified := 0
		for _, perm := range perms {
			// state: the slot, the writes done, the reader's steps done
			// (0: waiting, 1-4: words read, 5: number read again).
			var walk func(mem [4]uint32, wi, ri int, got [4]uint32)
			walk = func(mem [4]uint32, wi, ri int, got [4]uint32) {
				if ri == 6 {
					return
				}
				if wi < len(writes) {
					m := mem
					m[writes[wi].word] = writes[wi].val
					walk(m, wi+1, ri, got)
				}
				switch {
				case ri == 0:
					if int32(mem[0]-want[0]) >= 0 {
						walk(mem, wi, 1, got)
					}
				case ri <= 4:
					g := got
					g[perm[ri-1]] = mem[perm[ri-1]]
					walk(mem, wi, ri+1, g)
				case ri == 5:
					got[0] = mem[0]
					if got[0] == want[0] {
						require.Equal(t, want, got, "offer %d read torn (words in order %v)", want[0], perm)
						verified++
					}
					walk(mem, wi, 6, got)
				}
			}
			walk(old, 0, 0, [4]uint32{})
		}
		assert.Positive(t, verified, "offer %d never verified", want[0])
	}
}

// permutations returns every order of xs.
func permutations(xs []int) [][]int {
	if len(xs) <= 1 {
		return [][]int{append([]int(nil), xs...)}
	}
	var out [][]int
	for i := range xs {
		rest := append(append([]int(nil), xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{xs[i]}, p...))
		}
	}
	return out
}

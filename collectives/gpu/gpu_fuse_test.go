package gpu

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/cuda"
)

// fuseCall is one AllReduce of a fused-group case: its count and its
// buffers' byte offsets in the rank's send and recv areas (in place: the
// input is put at roff and send is recv).
type fuseCall struct {
	count      int
	soff, roff int
	inPlace    bool
}

// fuseCase is a group on every rank: calls, inputs by [call][rank], and the
// used length of the send and recv areas, which start base bytes into the
// rig's buffers.
type fuseCase struct {
	dt          collectives.DataType
	op          collectives.Op
	calls       []fuseCall
	ins         [][][]byte
	base        int
	sendN, rcvN int
}

// llLimit is the most bytes a call of these tests has: what the LL kernel
// takes on nranks ranks (collectives.DefaultThresholds), and no more than
// keeps every rank's blocks resident on the one GPU together, one block on
// each of an H200's 132 SMs: a block waits for the same block of every
// peer, which could not start while waiting blocks filled the SMs.
func llLimit(nranks int) int {
	th := collectives.DefaultThresholds
	lim := int(min(th.LL[collectives.AllReduce], llMaxBytes))
	if nranks > 2 {
		lim = min(lim, int(th.TwoShot)-1)
	}
	return min(lim, 132/nranks*defaultLLBlock)
}

// newFuseCase draws ncalls AllReduces of random sizes from 0 to limit
// bytes (mostly small ones, as a gradient bucket's), a third in place,
// some off 16-byte boundaries, laid out within capBytes.
func newFuseCase(rng *rand.Rand, n int, dt collectives.DataType, op collectives.Op, ncalls, limit, capBytes int) *fuseCase {
	es := dt.Size()
	c := &fuseCase{dt: dt, op: op}
	for range ncalls {
		var b int
		switch p := rng.IntN(10); {
		case p == 0:
			b = 0
		case p <= 5:
			b = rng.IntN(min(4<<10, limit+1))
		case p <= 8:
			b = rng.IntN(min(32<<10, limit+1))
		default:
			b = rng.IntN(limit + 1)
		}
		cl := fuseCall{count: b / es, inPlace: rng.IntN(3) == 0}
		mis := 0
		if rng.IntN(4) == 0 {
			mis = es
		}
		cl.roff = (c.rcvN+255)&^255 + mis
		if cl.roff+cl.count*es+guard > capBytes {
			break
		}
		c.rcvN = cl.roff + cl.count*es
		if cl.inPlace {
			cl.soff = cl.roff
		} else {
			cl.soff = (c.sendN+255)&^255 + mis
			if cl.soff+cl.count*es > capBytes {
				break
			}
			c.sendN = cl.soff + cl.count*es
		}
		ins := make([][]byte, n)
		for r := range ins {
			ins[r] = make([]byte, cl.count*es)
			fill(rng, dt, op, ins[r])
		}
		c.calls = append(c.calls, cl)
		c.ins = append(c.ins, ins)
	}
	c.rcvN += guard
	return c
}

// refill draws new inputs for the same calls (a graph replay's).
func (c *fuseCase) refill(rng *rand.Rand) {
	for _, ins := range c.ins {
		for _, in := range ins {
			fill(rng, c.dt, c.op, in)
		}
	}
}

// args is rank's group; seq numbers the calls from seq0+1.
func (c *fuseCase) args(r *rig, rank int, seq0 uint64) []collectives.Args {
	out := make([]collectives.Args, len(c.calls))
	for i, cl := range c.calls {
		recv := uintptr(r.recv[rank]) + uintptr(c.base+cl.roff)
		send := uintptr(r.send[rank]) + uintptr(c.base+cl.soff)
		if cl.inPlace {
			send = recv
		}
		out[i] = collectives.Args{Coll: collectives.AllReduce, Send: send, Recv: recv, Count: cl.count, Type: c.dt,
			Op: c.op, Stream: uintptr(r.streams[rank]), Seq: seq0 + uint64(i) + 1}
	}
	return out
}

// upload puts every rank's inputs in place and poisons the rest of its
// recv area.
func (c *fuseCase) upload(t *testing.T, r *rig) {
	for rank := range r.bes {
		send := make([]byte, c.sendN)
		recv := bytes.Repeat([]byte{0xA5}, c.rcvN)
		for i, cl := range c.calls {
			if cl.inPlace {
				copy(recv[cl.roff:], c.ins[i][rank])
			} else {
				copy(send[cl.soff:], c.ins[i][rank])
			}
		}
		r.put(t, rank, r.send[rank]+cuda.DevicePtr(c.base), send)
		r.put(t, rank, r.recv[rank]+cuda.DevicePtr(c.base), recv)
	}
}

// check compares every call's output on every rank with the reference,
// and every other byte of the recv area with the poison.
func (c *fuseCase) check(t *testing.T, r *rig) error {
	for rank := range r.bes {
		if err := c.checkArea(r.get(t, rank, r.recv[rank]+cuda.DevicePtr(c.base), c.rcvN)); err != nil {
			return fmt.Errorf("rank %d: %w", rank, err)
		}
	}
	return nil
}

// checkArea checks one rank's recv area (c.rcvN bytes from c.base).
func (c *fuseCase) checkArea(got []byte) error {
	es := c.dt.Size()
	outside := bytes.Clone(got)
	for i, cl := range c.calls {
		if err := checkReduced(c.dt, c.op, c.ins[i], 0, got[cl.roff:], cl.count); err != nil {
			return fmt.Errorf("call %d (count %d, in place %v): %w", i, cl.count, cl.inPlace, err)
		}
		copy(outside[cl.roff:cl.roff+cl.count*es], bytes.Repeat([]byte{0xA5}, cl.count*es))
	}
	for i, x := range outside {
		if x != 0xA5 {
			return fmt.Errorf("recv area byte %d outside every output written", i)
		}
	}
	return nil
}

// wantLaunches is an independent count of a case's launches on a rank
// that fuses: batches of at most fuseMaxDescs calls with data and
// llMaxBytes together, each one launch (every call here is an LL one).
func (c *fuseCase) wantLaunches(fuses bool) int {
	launches, descs, total := 0, 0, 0
	for _, cl := range c.calls {
		b := cl.count * c.dt.Size()
		if b == 0 {
			continue
		}
		if !fuses {
			launches++
			continue
		}
		if descs == fuseMaxDescs || total+b > llMaxBytes {
			launches++
			descs, total = 0, 0
		}
		descs++
		total += b
	}
	if descs > 0 {
		launches++
	}
	return launches
}

// run enqueues the case's group on every rank and checks each rank's
// count of launches.
func (c *fuseCase) run(t *testing.T, r *rig, seq0 uint64) {
	t.Helper()
	for rank, be := range r.bes {
		g := &collectives.Group{Colls: c.args(r, rank, seq0)}
		for i := range g.Colls {
			require.NoError(t, g.Colls[i].Validate(rank, len(r.bes)))
		}
		require.NoError(t, be.RunGroup(context.Background(), g))
		require.Equal(t, c.wantLaunches(be.fuse.on), be.fuse.groupLaunches, "rank %d: launches of a group of %d", rank, len(c.calls))
	}
}

const fuseCap = 40 << 20

// sharedRig is n ranks on GPU 0 (their kernels run side by side there).
func sharedRig(t *testing.T, n int) *rig {
	r := newRigOn(t, n, fuseCap, func(int) int { return 0 })
	for rank, be := range r.bes {
		require.True(t, be.fuse.on, "rank %d: group fusion is off (GOCCL_GROUP_FUSE=0, or a fatbin without goccl_fused_*)", rank)
	}
	return r
}

// TestGPUGroupFusion runs groups of 1 to 64 AllReduces of random sizes up
// to the LL threshold, every type and op, on 2 and 3 ranks sharing GPU 0:
// results against the host reference, poisoned outputs, one launch per
// batch; some groups with one rank launching its calls one by one, which
// must meet the others' fused launches.
func TestGPUGroupFusion(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks on one GPU", n), func(t *testing.T) {
			r := sharedRig(t, n)
			rng := rand.New(rand.NewPCG(21, uint64(n)))
			sizes := []int{1, 2, 64, 63, 8, 33}
			var seq uint64
			fused0 := r.bes[0].fuse.fused
			k := 0
			for _, dt := range collectives.AllDataTypes() {
				for _, op := range collectives.AllOps() {
					ncalls := 1 + rng.IntN(fuseMaxDescs)
					if k < len(sizes) {
						ncalls = sizes[k]
					}
					c := newFuseCase(rng, n, dt, op, ncalls, llLimit(n), fuseCap)
					mixed := k%5 == 4
					r.bes[n-1].fuse.on = !mixed
					c.upload(t, r)
					c.run(t, r, seq)
					seq += uint64(len(c.calls))
					r.sync(t)
					require.NoError(t, c.check(t, r), "%s %s, %d calls, last rank fusing: %v", dt, op, len(c.calls), !mixed)
					k++
				}
			}
			r.bes[n-1].fuse.on = true
			require.Greater(t, r.bes[0].fuse.fused, fused0, "no group fused")
			t.Logf("%d ranks: %d groups, %d fused launches carrying %d calls on rank 0", n, k,
				r.bes[0].fuse.fused-fused0, r.bes[0].fuse.calls)
		})
	}
}

// TestGPUGroupFusionGraphReplay captures two fused groups on every rank
// and replays them with new inputs: the graph's descriptors stay where
// the capture put them, and the LL epochs advance on the device; a group
// run after the replays still meets its peers.
func TestGPUGroupFusionGraphReplay(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks on one GPU", n), func(t *testing.T) {
			r := sharedRig(t, n)
			rng := rand.New(rand.NewPCG(23, uint64(n)))
			cases := []*fuseCase{
				newFuseCase(rng, n, collectives.Float32, collectives.Sum, 24, llLimit(n), fuseCap/2),
				newFuseCase(rng, n, collectives.BFloat16, collectives.Max, 10, 64<<10, fuseCap/2),
			}
			cases[1].base = fuseCap / 2 // after the first case's buffers
			for rank, be := range r.bes {
				require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureRelaxed))
			}
			fused0 := r.bes[0].fuse.fused
			var seq uint64
			for _, c := range cases {
				c.run(t, r, seq)
				seq += uint64(len(c.calls))
			}
			require.Greater(t, r.bes[0].fuse.fused, fused0, "the captured groups were not fused")
			execs := make([]cuda.GraphExec, n)
			for rank := range r.bes {
				execs[rank] = r.endCapture(t, rank)
			}
			for it := range 6 {
				for _, c := range cases {
					c.refill(rng)
					c.upload(t, r)
				}
				r.launchGraphs(t, execs)
				r.sync(t)
				for i, c := range cases {
					require.NoError(t, c.check(t, r), "replay %d, group %d", it, i)
				}
			}
			c := newFuseCase(rng, n, collectives.Int32, collectives.Sum, 40, llLimit(n), fuseCap/2)
			c.upload(t, r)
			c.run(t, r, seq)
			r.sync(t)
			require.NoError(t, c.check(t, r), "a group after the replays")
		})
	}
}

// TestGPUAllToAllOneShot runs AllToAlls of random sizes per peer up to the
// one-shot threshold (odd ones too, in and out of place) on 2 and 3 ranks
// sharing GPU 0 against the inputs, with poisoned outputs, LL AllReduce
// groups between them (the two share lines and epochs), then a captured
// AllToAll replayed with new inputs.
func TestGPUAllToAllOneShot(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks on one GPU", n), func(t *testing.T) {
			r := sharedRig(t, n)
			require.NotZero(t, r.bes[0].a2a, "the fatbin lacks goccl_alltoall_ll")
			rng := rand.New(rand.NewPCG(25, uint64(n)))
			var seq uint64
			maxPeer := min(defaultA2ALL, 132/n*defaultLLBlock) // every rank's blocks resident together (llLimit)
			run := func(nb int, inPlace bool) {
				for rank, be := range r.bes {
					recv := uintptr(r.recv[rank])
					send := uintptr(r.send[rank])
					if inPlace {
						send = recv
					}
					require.NoError(t, be.RunGroup(context.Background(),
						a2aGroup(n, send, recv, nb, collectives.Uint8, uintptr(r.streams[rank]), seq+1)))
				}
				seq++
			}
			upload := func(nb int, inPlace bool) [][]byte {
				ins := make([][]byte, n)
				for rank := range r.bes {
					ins[rank] = make([]byte, n*nb)
					for i := range ins[rank] {
						ins[rank][i] = byte(rng.Uint32())
					}
					poison := bytes.Repeat([]byte{0xA5}, n*nb+guard)
					if inPlace {
						copy(poison, ins[rank])
					} else {
						r.put(t, rank, r.send[rank], ins[rank])
					}
					r.put(t, rank, r.recv[rank], poison)
				}
				return ins
			}
			check := func(nb int, ins [][]byte, what string) {
				for rank := range r.bes {
					got := r.get(t, rank, r.recv[rank], n*nb+guard)
					for src := range n {
						require.True(t, bytes.Equal(ins[src][rank*nb:(rank+1)*nb], got[src*nb:(src+1)*nb]),
							"%s: rank %d: chunk from rank %d", what, rank, src)
					}
					require.True(t, bytes.Equal(bytes.Repeat([]byte{0xA5}, guard), got[n*nb:]), "%s: rank %d: past recv", what, rank)
				}
			}
			for k := range 40 {
				nb := 1 + rng.IntN(maxPeer)
				if k%4 == 0 {
					nb = 1 + rng.IntN(64)
				}
				inPlace := k%3 == 0
				ins := upload(nb, inPlace)
				run(nb, inPlace)
				r.sync(t)
				check(nb, ins, fmt.Sprintf("AllToAll %d: %d nb per peer, in place %v", k, nb, inPlace))
				if k%5 == 4 {
					c := newFuseCase(rng, n, collectives.Float32, collectives.Sum, 8, llLimit(n), fuseCap/2)
					c.base = fuseCap / 2
					c.upload(t, r)
					c.run(t, r, seq)
					seq += uint64(len(c.calls))
					r.sync(t)
					require.NoError(t, c.check(t, r), "a fused group after AllToAll %d", k)
				}
			}
			const nb = 3000
			for rank, be := range r.bes {
				require.NoError(t, r.drv.StreamBeginCapture(be.ctx, r.streams[rank], cuda.CaptureRelaxed))
			}
			run(nb, false)
			execs := make([]cuda.GraphExec, n)
			for rank := range r.bes {
				execs[rank] = r.endCapture(t, rank)
			}
			for it := range 5 {
				ins := upload(nb, false)
				r.launchGraphs(t, execs)
				r.sync(t)
				check(nb, ins, fmt.Sprintf("replay %d", it))
			}
		})
	}
}

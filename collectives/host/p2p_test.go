package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
)

// msg is one message of a point-to-point plan: the k-th from one rank to
// another.
type msg struct {
	count int
	dt    collectives.DataType
}

// plan is what every rank sends to every other (msgs[s][d] in order) and
// the order each rank lists its operations in; content is regenerated
// from (s, d, k), independently of the backend.
type plan struct {
	n     int
	msgs  [][][]msg
	order [][]opRef // per rank, the group's operations in call order
}

type opRef struct {
	kind collectives.P2PKind
	peer int
}

func newPlan(n int) *plan {
	p := &plan{n: n, msgs: make([][][]msg, n), order: make([][]opRef, n)}
	for s := range p.msgs {
		p.msgs[s] = make([][]msg, n)
	}
	return p
}

// add appends a message s->d and the two operations that move it.
func (p *plan) add(s, d, count int, dt collectives.DataType) {
	p.msgs[s][d] = append(p.msgs[s][d], msg{count, dt})
	p.order[s] = append(p.order[s], opRef{collectives.SendOp, d})
	p.order[d] = append(p.order[d], opRef{collectives.RecvOp, s})
}

// shuffle reorders every rank's operations at random; messages of one pair
// keep their order because the k-th operation of a kind to a peer is
// bound to message k only when the group is built.
func (p *plan) shuffle(rng *rand.Rand) {
	for _, o := range p.order {
		rng.Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
	}
}

// reverse lists every rank's operations backwards (Recvs before Sends).
func (p *plan) reverse() {
	for _, o := range p.order {
		for i, j := 0, len(o)-1; i < j; i, j = i+1, j-1 {
			o[i], o[j] = o[j], o[i]
		}
	}
}

// content is message k from s to d: random bytes of its own seed.
func content(s, d, k int, m msg) []byte {
	b := make([]byte, m.count*m.dt.Size())
	fill(rand.New(rand.NewPCG(uint64(s*1000+d), uint64(k))), m.dt, collectives.Sum, b)
	return b
}

const guardBytes = 64

// rankBufs is one rank's buffers of a plan: sends hold the content, recvs
// are poisoned and followed by guard bytes.
type rankBufs struct {
	group collectives.Group
	send  [][]byte // per op, nil for Recvs
	recv  [][]byte // per op (with guard), nil for Sends
	want  [][]byte // per op: the expected content of a Recv
}

func (p *plan) buffers(r int) *rankBufs {
	rb := &rankBufs{}
	nth := map[opRef]int{}
	for _, o := range p.order[r] {
		k := nth[o]
		nth[o]++
		var m msg
		var from, to int
		if o.kind == collectives.SendOp {
			from, to, m = r, o.peer, p.msgs[r][o.peer][k]
		} else {
			from, to, m = o.peer, r, p.msgs[o.peer][r][k]
		}
		c := content(from, to, k, m)
		op := collectives.P2P{Kind: o.kind, Peer: o.peer, Count: m.count, Type: m.dt}
		if o.kind == collectives.SendOp {
			buf := alloc(len(c))
			copy(buf, c)
			op.Buf = addr(buf)
			rb.send = append(rb.send, buf)
			rb.recv, rb.want = append(rb.recv, nil), append(rb.want, nil)
		} else {
			buf := alloc(len(c) + guardBytes)
			poison(m.dt, buf)
			op.Buf = addr(buf)
			rb.recv, rb.want = append(rb.recv, buf), append(rb.want, c)
			rb.send = append(rb.send, nil)
		}
		rb.group.P2P = append(rb.group.P2P, op)
	}
	return rb
}

// check compares every Recv with its content, the guards with their
// poison, and every Send buffer with what it held.
func (p *plan) check(r int, rb *rankBufs) error {
	nth := map[opRef]int{}
	for i, o := range p.order[r] {
		k := nth[o]
		nth[o]++
		if o.kind == collectives.SendOp {
			m := p.msgs[r][o.peer][k]
			if !bytes.Equal(rb.send[i], content(r, o.peer, k, m)) {
				return fmt.Errorf("rank %d: Send %d to %d modified its buffer", r, k, o.peer)
			}
			continue
		}
		w := rb.want[i]
		got := rb.recv[i]
		if !bytes.Equal(got[:len(w)], w) {
			j := firstDiff(got[:len(w)], w)
			return fmt.Errorf("rank %d: Recv %d from %d (%d bytes): byte %d is %#x, want %#x", r, k, o.peer, len(w), j, got[j], w[j])
		}
		g := append([]byte(nil), got[len(w):]...)
		poison(p.msgs[o.peer][r][k].dt, got[len(w):])
		if !bytes.Equal(g, got[len(w):]) {
			return fmt.Errorf("rank %d: Recv %d from %d wrote past its %d bytes", r, k, o.peer, len(w))
		}
	}
	return nil
}

// runGroups runs every rank's group concurrently.
func (j *job) runGroups(ctx context.Context, groups []*collectives.Group) []error {
	return j.each(func(r int) error { return j.bes[r].(collectives.GroupRunner).RunGroup(ctx, groups[r]) })
}

// execute runs the plan once and checks every rank.
func (j *job) execute(p *plan) error {
	bufs := make([]*rankBufs, j.n)
	groups := make([]*collectives.Group, j.n)
	for r := range bufs {
		bufs[r] = p.buffers(r)
		groups[r] = &bufs[r].group
	}
	errs := j.runGroups(context.Background(), groups)
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	for r := range bufs {
		if err := p.check(r, bufs[r]); err != nil {
			return err
		}
	}
	runtime.KeepAlive(bufs)
	return nil
}

var p2pTypes = []collectives.DataType{collectives.Int8, collectives.Float16, collectives.Float32, collectives.Float64, collectives.Uint32}

// patterns are the plans every rank count runs. counts are chosen per
// message from sizes (0, 1, a prime, several slots, many rings).
func patterns(n int, rng *rand.Rand) map[string]*plan {
	sizes := []int{0, 1, 7, 4095, 50000}
	pick := func() (int, collectives.DataType) {
		return sizes[rng.IntN(len(sizes))], p2pTypes[rng.IntN(len(p2pTypes))]
	}
	out := map[string]*plan{}
	ring := newPlan(n)
	for r := 0; r < n; r++ {
		ring.add(r, (r+1)%n, 4095, collectives.Float32)
	}
	out["ring"] = ring
	rev := newPlan(n)
	for r := 0; r < n; r++ {
		c, dt := pick()
		rev.add(r, (r+n-1)%n, c, dt)
	}
	rev.reverse()
	out["reverse ring, Recv first"] = rev
	all := newPlan(n)
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			c, dt := pick()
			all.add(s, d, c, dt)
		}
	}
	out["all pairs at once, self included"] = all
	v := newPlan(n)
	for s := 0; s < n; s++ {
		for d := 0; d < n; d++ {
			c := 0
			if rng.IntN(3) > 0 {
				c = rng.IntN(3000)
			}
			v.add(s, d, c, collectives.Int32)
		}
	}
	v.shuffle(rng)
	out["all-to-allv counts with zeros, shuffled"] = v
	multi := newPlan(n)
	for k := 0; k < 3; k++ {
		for s := 0; s < n; s++ {
			c, dt := pick()
			multi.add(s, (s+k)%n, c, dt)
			c, dt = pick()
			multi.add(s, (s+k)%n, c, dt)
		}
	}
	multi.shuffle(rng)
	out["several messages per pair, shuffled"] = multi
	self := newPlan(n)
	for s := 0; s < n; s++ {
		for k := 0; k < 3; k++ {
			c, dt := pick()
			self.add(s, s, c, dt)
		}
	}
	self.reverse()
	out["self sends only, Recvs first"] = self
	// Self messages (copied directly) between messages to a peer (through
	// the ring), the first larger than the ring.
	mixed := newPlan(n)
	for s := 0; s < n; s++ {
		mixed.add(s, s, 50000, collectives.Float64)
		mixed.add(s, s, 7, collectives.Int8)
		mixed.add(s, (s+1)%n, 4095, collectives.Float32)
		mixed.add(s, s, 0, collectives.Int8)
	}
	mixed.shuffle(rng)
	out["self messages between others, shuffled"] = mixed
	return out
}

func TestPointToPointPatterns(t *testing.T) {
	ranks := []int{1, 2, 3, 4, 8}
	if testing.Short() {
		ranks = []int{1, 3, 4}
	}
	for _, n := range ranks {
		// Tiny staging: rings of a few hundred bytes, so every message
		// above a few elements crosses many slots and wraps the ring.
		for _, staging := range []int{8 << 10, 0} {
			t.Run(fmt.Sprintf("ranks=%d/staging=%d", n, staging), func(t *testing.T) {
				j := newJob(t, n, Config{StagingBytes: staging, Timeout: time.Minute})
				rng := rand.New(rand.NewPCG(uint64(n), uint64(staging)))
				for name, p := range patterns(n, rng) {
					require.NoError(t, j.execute(p), name)
				}
			})
		}
	}
}

// TestGroupMixesCollectivesAndPairs: a group holding AllReduces and a
// ring exchange runs both, the collectives in order.
func TestGroupMixesCollectivesAndPairs(t *testing.T) {
	const n, count = 3, 1000
	j := newJob(t, n, Config{StagingBytes: 8 << 10, Timeout: time.Minute})
	p := newPlan(n)
	for r := 0; r < n; r++ {
		p.add(r, (r+1)%n, count, collectives.Float64)
	}
	p.reverse()
	bufs := make([]*rankBufs, n)
	groups := make([]*collectives.Group, n)
	ar := make([][]int32, n)
	for r := range bufs {
		bufs[r] = p.buffers(r)
		ar[r] = make([]int32, count)
		for i := range ar[r] {
			ar[r][i] = int32(r + 1)
		}
		// Two in-place AllReduces of one buffer: the second sees the
		// first's result only if they ran in order.
		a := collectives.Args{Coll: collectives.AllReduce, Send: addr32(ar[r]), Recv: addr32(ar[r]), Count: count, Type: collectives.Int32, Op: collectives.Sum}
		bufs[r].group.Colls = append(bufs[r].group.Colls, a, a)
		bufs[r].group.Colls[1].Op = collectives.Prod
		groups[r] = &bufs[r].group
	}
	for r, err := range j.runGroups(context.Background(), groups) {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range bufs {
		require.NoError(t, p.check(r, bufs[r]))
		for i, v := range ar[r] {
			require.Equal(t, int32(6*6*6), v, "rank %d element %d: sum then product", r, i)
		}
	}
	runtime.KeepAlive(ar)
}

func TestSizeMismatchFailsBothSides(t *testing.T) {
	for _, tc := range []struct {
		name       string
		send, recv int
	}{
		{"receiver expects less", 5000, 3000},
		{"receiver expects more", 3000, 5000},
		{"zero against some", 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			j := newJob(t, n, Config{StagingBytes: 8 << 10, Timeout: time.Minute})
			sbuf, rbuf := alloc(4*tc.send+4), alloc(4*tc.recv+4)
			abuf := make([][]int32, n)
			groups := make([]*collectives.Group, n)
			for r := range groups {
				groups[r] = &collectives.Group{}
				abuf[r] = []int32{int32(r), 1}
				// Every rank also runs an AllReduce: the pair's error must
				// not leave rank 2 waiting in it.
				groups[r].Colls = []collectives.Args{{Coll: collectives.AllReduce, Send: addr32(abuf[r]), Recv: addr32(abuf[r]), Count: 2, Type: collectives.Int32, Op: collectives.Sum}}
			}
			groups[0].P2P = []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: addr(sbuf), Count: tc.send, Type: collectives.Float32}}
			groups[1].P2P = []collectives.P2P{{Kind: collectives.RecvOp, Peer: 0, Buf: addr(rbuf), Count: tc.recv, Type: collectives.Float32}}
			errs := j.runGroups(context.Background(), groups)
			want := fmt.Sprintf("rank 0 sends %d float (%d bytes), rank 1 receives %d float (%d bytes)", tc.send, 4*tc.send, tc.recv, 4*tc.recv)
			for r := 0; r < 2; r++ {
				require.ErrorIs(t, errs[r], collectives.ErrInvalidCount, "rank %d", r)
				assert.ErrorIs(t, errs[r], collectives.ErrInvalidArgument)
				assert.Contains(t, errs[r].Error(), want, "rank %d", r)
			}
			require.NoError(t, errs[2])
			for r := range abuf {
				assert.Equal(t, []int32{3, 3}, abuf[r], "rank %d's AllReduce ran", r)
			}
			runtime.KeepAlive(sbuf)
			runtime.KeepAlive(rbuf)
			// The pair stays in step: the next messages arrive whole.
			p := newPlan(n)
			p.add(0, 1, 7000, collectives.Int8)
			p.add(1, 0, 3, collectives.Float64)
			require.NoError(t, j.execute(p))
		})
	}
}

// waitAlone starts rank 0's group alone (its peers never take part) and
// returns its result and how long it took.
func waitAlone(j *job, ctx context.Context, op collectives.P2P) (<-chan error, *time.Duration) {
	buf := alloc(op.Bytes() + 1)
	op.Buf = addr(buf)
	done := make(chan error, 1)
	var took time.Duration
	go func() {
		start := time.Now()
		err := j.bes[0].(collectives.GroupRunner).RunGroup(ctx, &collectives.Group{P2P: []collectives.P2P{op}})
		took = time.Since(start)
		runtime.KeepAlive(buf)
		done <- err
	}()
	return done, &took
}

func TestPointToPointWaitsEnd(t *testing.T) {
	// Large enough to fill the ring: the Send is stuck mid-message.
	send := collectives.P2P{Kind: collectives.SendOp, Peer: 1, Count: 1 << 20, Type: collectives.Float32}
	recv := collectives.P2P{Kind: collectives.RecvOp, Peer: 2, Count: 10, Type: collectives.Int64}
	cause := fmt.Errorf("operator pulled the plug")
	for _, tc := range []struct {
		name  string
		op    collectives.P2P
		limit time.Duration
		act   func(j *job, cancel func())
		check func(t *testing.T, err error)
	}{
		{"Send: the peer aborts", send, time.Minute, func(j *job, _ func()) { j.bes[1].Abort(cause) }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrAborted)
			var pe *collectives.PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 1, pe.Rank)
		}},
		{"Recv: this rank aborts", recv, time.Minute, func(j *job, _ func()) { j.bes[0].Abort(cause) }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrAborted)
			assert.ErrorIs(t, err, cause)
		}},
		{"Send: this rank closes", send, time.Minute, func(j *job, _ func()) { require.NoError(t, j.bes[0].Close()) }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrAborted)
			assert.ErrorIs(t, err, collectives.ErrClosed)
		}},
		{"Recv: the context ends", recv, time.Minute, func(_ *job, cancel func()) { cancel() }, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrAborted)
			assert.ErrorIs(t, err, context.Canceled)
		}},
		{"Send: the peer never comes", send, 300 * time.Millisecond, nil, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrTimeout)
			var pe *collectives.PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 1, pe.Rank)
			assert.Contains(t, err.Error(), "Send to rank 1 of 1048576 float")
		}},
		{"Recv: the peer never comes", recv, 300 * time.Millisecond, nil, func(t *testing.T, err error) {
			require.ErrorIs(t, err, collectives.ErrTimeout)
			var pe *collectives.PeerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, 2, pe.Rank)
			assert.Contains(t, err.Error(), "Recv from rank 2 of 10 int64")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 3, Config{Timeout: tc.limit})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done, took := waitAlone(j, ctx, tc.op)
			// Long enough to be asleep on the doorbell.
			time.Sleep(3 * napPhase)
			if tc.act != nil {
				tc.act(j, cancel)
			}
			select {
			case err := <-done:
				tc.check(t, err)
				assert.Less(t, *took, 3*napPhase+tc.limit%time.Minute+abortBound)
			case <-time.After(tc.limit + 2*abortBound):
				t.Fatal("the wait did not end")
			}
			// Every later call fails at once.
			err := j.bes[0].(collectives.GroupRunner).RunGroup(context.Background(), &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 0}}})
			assert.Error(t, err)
		})
	}
}

func TestRunGroupRejectsBadOperations(t *testing.T) {
	j := newJob(t, 2, Config{})
	buf := alloc(64)
	for _, tc := range []struct {
		name string
		op   collectives.P2P
		want error
	}{
		{"peer out of range", collectives.P2P{Kind: collectives.SendOp, Peer: 2, Buf: addr(buf), Count: 1, Type: collectives.Int8}, collectives.ErrInvalidPeer},
		{"negative peer", collectives.P2P{Kind: collectives.RecvOp, Peer: -1, Buf: addr(buf), Count: 1, Type: collectives.Int8}, collectives.ErrInvalidPeer},
		{"negative count", collectives.P2P{Kind: collectives.SendOp, Peer: 1, Buf: addr(buf), Count: -1, Type: collectives.Int8}, collectives.ErrInvalidCount},
		{"nil buffer", collectives.P2P{Kind: collectives.SendOp, Peer: 1, Count: 1, Type: collectives.Int8}, collectives.ErrNilPointer},
		{"bad type", collectives.P2P{Kind: collectives.SendOp, Peer: 1, Buf: addr(buf), Count: 1, Type: 99}, collectives.ErrUnknownDataType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A good operation first: nothing of the group may start.
			g := &collectives.Group{P2P: []collectives.P2P{{Kind: collectives.SendOp, Peer: 1, Buf: addr(buf), Count: 1, Type: collectives.Int8}, tc.op}}
			err := j.bes[0].(collectives.GroupRunner).RunGroup(context.Background(), g)
			require.ErrorIs(t, err, tc.want)
			assert.Contains(t, err.Error(), "call 1")
		})
	}
	runtime.KeepAlive(buf)
	// Nothing was sent: a fresh pair of messages pairs as the first.
	p := newPlan(2)
	p.add(0, 1, 5, collectives.Int8)
	require.NoError(t, j.execute(p))
}

// TestPointToPointAcrossProcesses exchanges messages between this process
// and a child through memfd segments and process-shared futexes: both
// ranks build the same plan and check their own side.
func TestPointToPointAcrossProcesses(t *testing.T) {
	b, wait := pairRank(t, "TestPointToPointAcrossProcesses")
	defer wait()
	ctx := context.Background()
	be, err := New(ctx, b, Config{StagingBytes: 64 << 10, Timeout: 30 * time.Second})
	require.NoError(t, err)
	defer be.Close()
	me := b.Rank()
	rng := rand.New(rand.NewPCG(5, 6))
	for it := 0; it < 3; it++ {
		p := newPlan(2)
		p.add(0, 1, 1<<20+3, collectives.Float32)
		p.add(1, 0, 1<<18, collectives.Float64)
		p.add(0, 0, 4095, collectives.Int8)
		p.add(1, 1, 0, collectives.Int8)
		p.add(1, 0, 7, collectives.BFloat16)
		p.shuffle(rng)
		rb := p.buffers(me)
		if it == 1 && me == 1 {
			time.Sleep(3 * napPhase) // rank 0 goes to sleep on its doorbell
		}
		require.NoError(t, be.(collectives.GroupRunner).RunGroup(ctx, &rb.group), "iteration %d", it)
		require.NoError(t, p.check(me, rb), "iteration %d", it)
		runtime.KeepAlive(rb)
	}
}

// A self Send and Recv of different sizes go through the ring, which
// reports the mismatch on both; the self pair stays in step.
func TestSelfSizeMismatch(t *testing.T) {
	j := newJob(t, 2, Config{StagingBytes: 8 << 10, Timeout: time.Minute})
	sbuf, rbuf := alloc(4000), alloc(8000)
	g := &collectives.Group{P2P: []collectives.P2P{
		{Kind: collectives.RecvOp, Peer: 0, Buf: addr(rbuf), Count: 2000, Type: collectives.Float32},
		{Kind: collectives.SendOp, Peer: 0, Buf: addr(sbuf), Count: 1000, Type: collectives.Float32},
	}}
	err := j.bes[0].(collectives.GroupRunner).RunGroup(context.Background(), g)
	require.ErrorIs(t, err, collectives.ErrInvalidCount)
	assert.Contains(t, err.Error(), "rank 0 sends 1000 float (4000 bytes), rank 0 receives 2000 float (8000 bytes)")
	runtime.KeepAlive(sbuf)
	runtime.KeepAlive(rbuf)
	p := newPlan(2)
	p.add(0, 0, 3000, collectives.Int32)
	p.add(1, 1, 5, collectives.Int8)
	require.NoError(t, j.execute(p))
}

// A rank that skipped a call meets its peer's next one: the numbered
// calls disagree and the communicator aborts, naming both.
func TestNumberedCallsMismatch(t *testing.T) {
	for _, tc := range []struct {
		name       string
		kind1      collectives.GroupKind
		seq0, seq1 uint64
	}{
		{"AllToAll numbers 5 and 6", collectives.AllToAllGroup, 5, 6},
		{"AllToAll against Gather", collectives.GatherGroup, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 2, Config{Timeout: time.Minute})
			bufs := [][]byte{alloc(64), alloc(64), alloc(64), alloc(64)}
			groups := make([]*collectives.Group, 2)
			for r := range groups {
				groups[r] = &collectives.Group{Kind: collectives.AllToAllGroup, Seq: tc.seq0, P2P: []collectives.P2P{
					{Kind: collectives.SendOp, Peer: 1 - r, Buf: addr(bufs[2*r]), Count: 16, Type: collectives.Int32},
					{Kind: collectives.RecvOp, Peer: 1 - r, Buf: addr(bufs[2*r+1]), Count: 16, Type: collectives.Int32},
				}}
			}
			groups[1].Kind, groups[1].Seq = tc.kind1, tc.seq1
			errs := j.runGroups(context.Background(), groups)
			runtime.KeepAlive(bufs)
			named := 0
			for r, err := range errs {
				require.ErrorIs(t, err, collectives.ErrAborted, "rank %d", r)
				if errors.Is(err, collectives.ErrCallMismatch) {
					named++
					assert.Contains(t, err.Error(), fmt.Sprintf("in %s (call %d)", tc.kind1, tc.seq1))
					assert.Contains(t, err.Error(), fmt.Sprintf("in AllToAll (call %d)", tc.seq0))
				}
			}
			assert.Positive(t, named, "a rank that saw the other call names both")
		})
	}
	// Plain groups are not numbered: the same messages pair.
	j := newJob(t, 2, Config{Timeout: time.Minute})
	p := newPlan(2)
	p.add(0, 1, 16, collectives.Int32)
	p.add(1, 0, 16, collectives.Int32)
	require.NoError(t, j.execute(p))
}

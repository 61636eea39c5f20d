package gpu

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internode/nccl"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// The composition across nodes checked on the CPU: host memory stands in
// for device memory, a fake backend for each node's and a fake engine for
// NCCL, each computing its collectives directly, so that the arithmetic of
// the legs (which block goes where, in which order) is checked against a
// reference computed over all ranks at once.

// fakeSpace is the "device memory" of one test: Go buffers by address.
type fakeSpace struct {
	mu   sync.Mutex
	bufs map[uintptr][]byte
	keys []uintptr
}

func (s *fakeSpace) alloc(n uint64) (uintptr, error) {
	b := make([]byte, n+8)
	s.mu.Lock()
	defer s.mu.Unlock()
	p := uintptr(len(s.keys)+1) << 40 // fake addresses: never dereferenced
	if s.bufs == nil {
		s.bufs = map[uintptr][]byte{}
	}
	s.bufs[p] = b
	s.keys = append(s.keys, p)
	return p, nil
}

// at is the n bytes at p.
func (s *fakeSpace) at(p uintptr, n int) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.keys), func(i int) bool { return s.keys[i] > p }) - 1
	if i < 0 {
		panic(fmt.Sprintf("address %#x outside every buffer", p))
	}
	b := s.bufs[s.keys[i]]
	off := int(p - s.keys[i])
	if off+n > len(b) {
		panic(fmt.Sprintf("address %#x + %d past its buffer of %d", p, n, len(b)))
	}
	return b[off : off+n]
}

type fakeMem struct{ s *fakeSpace }

func (m fakeMem) alloc(n uint64) (uintptr, error) { return m.s.alloc(n) }
func (m fakeMem) free(uintptr) error              { return nil }
func (m fakeMem) copy(dst, src uintptr, n uint64, _ uintptr) error {
	copy(m.s.at(dst, int(n)), m.s.at(src, int(n)))
	return nil
}
func (m fakeMem) order(uintptr, uintptr) error { return nil }
func (m fakeMem) sync() error                  { return nil }

// fakeCall is one member's share of a collective.
type fakeCall struct {
	coll                collectives.Collective
	send, recv          uintptr
	count, root, member int
	op                  collectives.Op
	scale               int32 // a PreMulSum's scalar (int32 elements)
}

// fakeHub runs the collectives of one group of members (a node, a rail,
// all ranks): the last member to arrive computes the call for all.
type fakeHub struct {
	s    *fakeSpace
	n    int
	mu   sync.Mutex
	cond *sync.Cond
	next []int
	rnds map[int]*fakeRound
	mail map[[2]int][][]byte  // point-to-point: (from, to) queue
	want map[[2]int][]uintptr // receives posted before their sends
}

type fakeRound struct {
	calls   []fakeCall
	arrived int
	done    bool
}

func newHub(s *fakeSpace, n int) *fakeHub {
	h := &fakeHub{s: s, n: n, next: make([]int, n), rnds: map[int]*fakeRound{}, mail: map[[2]int][][]byte{}, want: map[[2]int][]uintptr{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *fakeHub) join(c fakeCall) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.next[c.member]
	h.next[c.member]++
	r := h.rnds[k]
	if r == nil {
		r = &fakeRound{calls: make([]fakeCall, h.n)}
		h.rnds[k] = r
	}
	r.calls[c.member] = c
	if r.arrived++; r.arrived == h.n {
		h.compute(r.calls)
		r.done = true
		h.cond.Broadcast()
	}
	for !r.done {
		h.cond.Wait()
	}
}

// compute runs one collective on int32 elements.
func (h *fakeHub) compute(calls []fakeCall) {
	c0 := calls[0]
	n, cnt := h.n, c0.count
	B := 4 * cnt
	red := func(blocks func(m int) []byte) []byte {
		out := append([]byte(nil), blocks(0)...)
		if c0.op == collectives.PreMulSum {
			for i := 0; i < cnt; i++ {
				binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(binary.LittleEndian.Uint32(out[4*i:]))*calls[0].scale))
			}
		}
		for m := 1; m < n; m++ {
			in := blocks(m)
			for i := 0; i < cnt; i++ {
				a, b := int32(binary.LittleEndian.Uint32(out[4*i:])), int32(binary.LittleEndian.Uint32(in[4*i:]))
				switch c0.op {
				case collectives.Sum:
					a += b
				case collectives.PreMulSum:
					a += b * calls[m].scale
				case collectives.Max:
					a = max(a, b)
				}
				binary.LittleEndian.PutUint32(out[4*i:], uint32(a))
			}
		}
		return out
	}
	switch c0.coll {
	case collectives.AllReduce:
		res := red(func(m int) []byte { return h.s.at(calls[m].send, B) })
		for _, c := range calls {
			copy(h.s.at(c.recv, B), res)
		}
	case collectives.ReduceScatter:
		res := make([][]byte, n)
		for r := range n {
			res[r] = red(func(m int) []byte { return h.s.at(calls[m].send+uintptr(r*B), B) })
		}
		for r, c := range calls {
			copy(h.s.at(c.recv, B), res[r])
		}
	case collectives.AllGather:
		all := make([]byte, 0, n*B)
		for _, c := range calls {
			all = append(all, h.s.at(c.send, B)...)
		}
		for _, c := range calls {
			copy(h.s.at(c.recv, n*B), all)
		}
	case collectives.Broadcast:
		src := append([]byte(nil), h.s.at(calls[c0.root].send, B)...)
		for _, c := range calls {
			copy(h.s.at(c.recv, B), src)
		}
	case collectives.Reduce:
		res := red(func(m int) []byte { return h.s.at(calls[m].send, B) })
		copy(h.s.at(calls[c0.root].recv, B), res)
	}
}

// p2p: sends first (copied into the mailbox), then receives, as a group.
func (h *fakeHub) p2p(member int, ops []collectives.P2P) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range ops {
		if o.Kind == collectives.SendOp {
			k := [2]int{member, o.Peer}
			h.mail[k] = append(h.mail[k], append([]byte(nil), h.s.at(o.Buf, o.Bytes())...))
		}
	}
	h.cond.Broadcast()
	for _, o := range ops {
		if o.Kind == collectives.RecvOp {
			k := [2]int{o.Peer, member}
			for len(h.mail[k]) == 0 {
				h.cond.Wait()
			}
			copy(h.s.at(o.Buf, o.Bytes()), h.mail[k][0])
			h.mail[k] = h.mail[k][1:]
		}
	}
}

// fakeNodeBackend is one rank's node backend.
type fakeNodeBackend struct {
	h      *fakeHub
	member int
}

func (f *fakeNodeBackend) Run(_ context.Context, a *collectives.Args) error {
	f.h.join(fakeCall{coll: a.Coll, send: a.Send, recv: a.Recv, count: a.Count, root: a.Root, op: a.Op, member: f.member,
		scale: int32(uint32(a.Scalar.Bits))})
	return nil
}
func (f *fakeNodeBackend) RunGroup(_ context.Context, g *collectives.Group) error {
	f.h.p2p(f.member, g.P2P)
	return nil
}
func (f *fakeNodeBackend) Abort(error)  {}
func (f *fakeNodeBackend) Close() error { return nil }

// fakeComm is one rank's NCCL communicator.
type fakeComm struct {
	h         *fakeHub
	member    int
	ops       map[nccl.Op]int32 // operators CreatePreMulSum made, with their scalars
	next      int
	destroyed int
}

func (c *fakeComm) run(coll collectives.Collective, send, recv uintptr, count, root int, op nccl.Op) error {
	call := fakeCall{coll: coll, send: send, recv: recv, count: count, root: root, op: collectives.Op(op), member: c.member}
	switch scale, made := c.ops[op]; {
	case made:
		call.op, call.scale = collectives.PreMulSum, scale
	case collectives.Op(op) == collectives.PreMulSum:
		// As NCCL: an operator it did not create is unknown to it.
		return errors.New("fake NCCL: reduction operation 5 unknown to this communicator")
	}
	c.h.join(call)
	return nil
}

// CreatePreMulSum hands out NCCL-like operator numbers from 64, each
// remembering its scalar (int32 elements, by value).
func (c *fakeComm) CreatePreMulSum(bits uint64, devPtr uintptr, _ nccl.DataType) (nccl.Op, error) {
	if devPtr != 0 {
		return 0, errors.New("fake NCCL: no device memory here")
	}
	if c.ops == nil {
		c.ops = map[nccl.Op]int32{}
	}
	c.next++
	op := nccl.Op(63 + c.next)
	c.ops[op] = int32(uint32(bits))
	return op, nil
}

func (c *fakeComm) DestroyOp(op nccl.Op) error {
	if _, ok := c.ops[op]; !ok {
		return errors.New("fake NCCL: no such operator")
	}
	delete(c.ops, op)
	c.destroyed++
	return nil
}
func (c *fakeComm) AllReduce(s, r uintptr, n int, _ nccl.DataType, op nccl.Op, _ uintptr) error {
	return c.run(collectives.AllReduce, s, r, n, 0, op)
}
func (c *fakeComm) ReduceScatter(s, r uintptr, n int, _ nccl.DataType, op nccl.Op, _ uintptr) error {
	return c.run(collectives.ReduceScatter, s, r, n, 0, op)
}
func (c *fakeComm) AllGather(s, r uintptr, n int, _ nccl.DataType, _ uintptr) error {
	return c.run(collectives.AllGather, s, r, n, 0, 0)
}
func (c *fakeComm) Broadcast(s, r uintptr, n int, _ nccl.DataType, root int, _ uintptr) error {
	return c.run(collectives.Broadcast, s, r, n, root, 0)
}
func (c *fakeComm) Reduce(s, r uintptr, n int, _ nccl.DataType, op nccl.Op, root int, _ uintptr) error {
	return c.run(collectives.Reduce, s, r, n, root, op)
}

// Send and Recv never block, as NCCL's enqueue does not: a Recv posted
// before its Send is completed by the Send.
func (c *fakeComm) Send(b uintptr, n int, _ nccl.DataType, peer int, _ uintptr) error {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]int{c.member, peer}
	data := append([]byte(nil), h.s.at(b, 4*n)...)
	if w := h.want[k]; len(w) > 0 {
		copy(h.s.at(w[0], len(data)), data)
		h.want[k] = w[1:]
		return nil
	}
	h.mail[k] = append(h.mail[k], data)
	return nil
}
func (c *fakeComm) Recv(b uintptr, n int, _ nccl.DataType, peer int, _ uintptr) error {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	k := [2]int{peer, c.member}
	if q := h.mail[k]; len(q) > 0 {
		copy(h.s.at(b, 4*n), q[0])
		h.mail[k] = q[1:]
		return nil
	}
	h.want[k] = append(h.want[k], b)
	return nil
}
func (c *fakeComm) AsyncError() error { return nil }
func (c *fakeComm) Abort() error      { return nil }
func (c *fakeComm) Destroy() error    { return nil }

// fakeEngine hands out ids and joins communicators by id; it records the
// host ids NCCL would have been given.
type fakeEngine struct {
	s     *fakeSpace
	mu    sync.Mutex
	ids   int
	hubs  map[nccl.UniqueID]*fakeHub
	hosts map[nccl.UniqueID]map[int]string
}

func (e *fakeEngine) GetUniqueID() (nccl.UniqueID, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ids++
	var id nccl.UniqueID
	binary.LittleEndian.PutUint64(id[:], uint64(e.ids))
	return id, nil
}
func (e *fakeEngine) InitRank(_ uintptr, nranks, rank int, id nccl.UniqueID, host string) (interComm, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.hubs[id]
	if h == nil {
		h = newHub(e.s, nranks)
		e.hubs[id] = h
		e.hosts[id] = map[int]string{}
	}
	e.hosts[id][rank] = host
	return &fakeComm{h: h, member: rank}, nil
}
func (e *fakeEngine) GroupStart() error      { return nil }
func (e *fakeEngine) GroupEnd(uintptr) error { return nil }
func (e *fakeEngine) Describe() string       { return "fake NCCL" }

// fakeJob builds every rank's multi over the fakes.
func fakeJob(t *testing.T, nodes []string) ([]*multi, *fakeSpace, *fakeEngine) {
	t.Helper()
	s := &fakeSpace{}
	eng := &fakeEngine{s: s, hubs: map[nccl.UniqueID]*fakeHub{}, hosts: map[nccl.UniqueID]map[int]string{}}
	n := len(nodes)
	ms := make([]*multi, n)
	nodeHubs := map[string]*fakeHub{}
	for r := range n {
		m := &multi{rank: r, n: n, log: slog.New(slog.NewTextHandler(io.Discard, nil)), mem: fakeMem{s}}
		m.layout(nodes)
		key := nodes[r]
		if nodeHubs[key] == nil {
			nodeHubs[key] = newHub(s, len(m.members[m.node]))
		}
		m.local = &fakeNodeBackend{h: nodeHubs[key], member: m.lrank}
		ms[r] = m
	}
	g := transporttest.NewGroup(n)
	require.NoError(t, g.Run(func(r int, b transport.Bootstrap) error {
		return ms[r].connect(context.Background(), b, eng, 0, nodes[r])
	}))
	return ms, s, eng
}

func i32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestMultiComposedCollectives runs every collective through the
// composition on several layouts, in and out of place, with counts that
// divide by the node's size and counts that do not, and checks every
// rank's result against the reference over all ranks.
func TestMultiComposedCollectives(t *testing.T) {
	layouts := []struct {
		name  string
		nodes []string
	}{
		{"2x2 node by node", []string{"a", "a", "b", "b"}},
		{"3x2 node by node", []string{"a", "a", "b", "b", "c", "c"}},
		{"2x2 interleaved", []string{"a", "b", "a", "b"}},
		{"2x3 scattered", []string{"b", "a", "a", "b", "a", "b"}},
		{"2+1 unequal (flat)", []string{"a", "a", "b"}},
	}
	rng := rand.New(rand.NewPCG(7, 31))
	for _, lt := range layouts {
		ms, s, _ := fakeJob(t, lt.nodes)
		n := len(ms)
		for _, coll := range collectives.AllCollectives() {
			for _, count := range []int{1, 7, 12} {
				for _, inPlace := range []bool{false, true} {
					for _, root := range []int{0, n - 1} {
						if root != 0 && coll != collectives.Broadcast && coll != collectives.Reduce {
							continue
						}
						op := collectives.Sum
						switch count {
						case 7:
							op = collectives.Max
						case 12:
							op = collectives.PreMulSum
						}
						name := fmt.Sprintf("%s/%s/n=%d/inplace=%v/root=%d", lt.name, coll, count, inPlace, root)
						t.Run(name, func(t *testing.T) {
							checkComposed(t, ms, s, rng, coll, count, op, root, inPlace)
						})
					}
				}
			}
		}
	}
}

func checkComposed(t *testing.T, ms []*multi, s *fakeSpace, rng *rand.Rand, coll collectives.Collective, count int, op collectives.Op, root int, inPlace bool) {
	n := len(ms)
	B := 4 * count
	a := collectives.Args{Coll: coll, Count: count, Type: collectives.Int32, Op: op, Root: root}
	sendN, recvN := a.SendBytes(n), a.RecvBytes(n)
	inputs := make([][]byte, n)
	args := make([]collectives.Args, n)
	for r := range n {
		in := make([]byte, sendN)
		for i := 0; i < sendN; i += 4 {
			binary.LittleEndian.PutUint32(in[i:], uint32(rng.Int32N(2000)-1000))
		}
		inputs[r] = in
		args[r] = a
		args[r].Seq = uint64(r)
		args[r].Scalar.Bits = uint64(r + 2) // PreMulSum: each rank its own
		recv, _ := s.alloc(uint64(max(recvN, sendN)))
		for i := range s.at(recv, recvN) {
			s.at(recv, recvN)[i] = 0xEE // poison
		}
		args[r].Recv = recv
		switch {
		case !inPlace:
			send, _ := s.alloc(uint64(sendN))
			copy(s.at(send, sendN), in)
			args[r].Send = send
		case coll == collectives.AllGather:
			args[r].Send = recv + uintptr(r*B)
			copy(s.at(args[r].Send, B), in)
		case coll == collectives.ReduceScatter:
			send, _ := s.alloc(uint64(sendN))
			copy(s.at(send, sendN), in)
			args[r].Send, args[r].Recv = send, send+uintptr(r*B)
		default:
			copy(s.at(recv, sendN), in)
			args[r].Send = recv
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = ms[r].Run(context.Background(), &args[r])
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	if op == collectives.PreMulSum && coll.Reduces() && !ms[0].equal {
		for r, m := range ms {
			fc := m.flat.(*fakeComm)
			assert.Empty(t, fc.ops, "rank %d: every operator made for a flat PreMulSum is destroyed", r)
			assert.Positive(t, fc.destroyed, "rank %d: the flat PreMulSum made its operator", r)
		}
	}
	reduce := func(block int) []int32 {
		out := make([]int32, count)
		for r := range n {
			v := i32s(inputs[r][block*B : (block+1)*B])
			for i := range out {
				switch {
				case r == 0 && op == collectives.PreMulSum:
					out[i] = v[i] * 2
				case r == 0:
					out[i] = v[i]
				case op == collectives.Sum:
					out[i] += v[i]
				case op == collectives.PreMulSum:
					out[i] += v[i] * int32(r+2)
				default:
					out[i] = max(out[i], v[i])
				}
			}
		}
		return out
	}
	for r := range n {
		var want []int32
		switch coll {
		case collectives.AllReduce:
			want = reduce(0)
		case collectives.ReduceScatter:
			want = reduce(r)
		case collectives.AllGather:
			for q := range n {
				want = append(want, i32s(inputs[q])...)
			}
		case collectives.Broadcast:
			want = i32s(inputs[root])
		case collectives.Reduce:
			if r != root {
				continue
			}
			want = reduce(0)
		}
		got := i32s(s.at(args[r].Recv, len(want)*4))
		assert.Equal(t, want, got, "rank %d", r)
	}
}

// TestMultiPointToPoint: a ring of Sends and Recvs and an AllToAll-style
// exchange, the pairs inside a node through the node backend and those
// across nodes through the flat communicator, each peer's data where it
// belongs.
func TestMultiPointToPoint(t *testing.T) {
	for _, nodes := range [][]string{{"a", "a", "b", "b"}, {"a", "b", "a", "b", "c", "c"}} {
		ms, s, _ := fakeJob(t, nodes)
		n := len(ms)
		const count = 5
		B := 4 * count
		send := make([]uintptr, n)
		recv := make([]uintptr, n)
		for r := range n {
			send[r], _ = s.alloc(uint64(n * B))
			recv[r], _ = s.alloc(uint64(n * B))
			for i := 0; i < n*count; i++ {
				binary.LittleEndian.PutUint32(s.at(send[r]+uintptr(4*i), 4), uint32(1000*r+i))
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := collectives.Group{Kind: collectives.AllToAllGroup}
				for p := range n { // Recvs first: the group must not care
					g.P2P = append(g.P2P, collectives.P2P{Kind: collectives.RecvOp, Peer: p, Buf: recv[r] + uintptr(p*B), Count: count, Type: collectives.Int32})
				}
				for p := range n {
					g.P2P = append(g.P2P, collectives.P2P{Kind: collectives.SendOp, Peer: p, Buf: send[r] + uintptr(p*B), Count: count, Type: collectives.Int32})
				}
				errs[r] = ms[r].RunGroup(context.Background(), &g)
			}()
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "rank %d", r)
			for p := range n {
				got := i32s(s.at(recv[r]+uintptr(p*B), B))
				want := make([]int32, count)
				for i := range want {
					want[i] = int32(1000*p + r*count + i)
				}
				assert.Equal(t, want, got, "%v: rank %d's block from rank %d", nodes, r, p)
			}
		}
	}
}

// TestMultiHostIDs: every rank is a host of its own to NCCL, on its rail
// and on the flat communicator alike (NCCL reads NCCL_HOSTID once).
func TestMultiHostIDs(t *testing.T) {
	ms, _, eng := fakeJob(t, []string{"a", "a", "b", "b"})
	require.Len(t, eng.hosts, 3, "two rails and the flat communicator")
	for _, m := range ms {
		require.NotNil(t, m.rail)
		require.NotNil(t, m.flat)
	}
	var flat map[int]string
	for _, h := range eng.hosts {
		if len(h) == 4 {
			flat = h
			continue
		}
		require.Len(t, h, 2)
		assert.Contains(t, []map[int]string{{0: "goccl-a-0", 1: "goccl-b-0"}, {0: "goccl-a-1", 1: "goccl-b-1"}}, h)
	}
	assert.Equal(t, map[int]string{0: "goccl-a-0", 1: "goccl-a-1", 2: "goccl-b-0", 3: "goccl-b-1"}, flat)
}

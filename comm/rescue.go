package comm

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccl/goccl/topology"
)

// rescuePoint is what a rank has, from init, so that Shrink can work
// when the communicator's bootstrap no longer can (its rank 0 died, or
// the star failed): a place on a TCP listener on the interface the
// bootstrap uses, whose address every rank learned at init. The listener
// is the rank's rescue hub (rescuehub.go): opened by a communicator made
// by init, shared by the children Split and Shrink make of it, which
// open none. The hub queues a communicator's rescue connections here
// until Shrink runs. A dead rank's listener dies with it, so a survivor
// that dials it is refused at once instead of waiting; a rank that closed
// this communicator answers at once that it did. The same init exchange
// gives every rank's node (for the children's local ranks) and the
// interface Split's children listen on across nodes.
type rescuePoint struct {
	hub     *rescueHub // nil with one rank, or when listening failed (why)
	why     string
	rank    int
	ip      netip.Addr // GOCCL_SOCKET_IFNAME's interface, else that of this rank's bootstrap connections
	addrs   []string   // every rank's rescue address; "" when it has none
	nodes   []string   // every rank's node key
	devices []int      // every rank's CUDA ordinal, -1 none
	buses   []string   // every rank's GPU's PCI bus id, "" unknown
	netMbps []uint32   // every rank's inter-node line rate, Mb/s, 0 unknown
	magic   uint64     // opens rescue connections; derived from the job's magic

	mu sync.Mutex // one Shrink at a time on a communicator

	// The connections the hub routed here, oldest first, until a Shrink
	// (or the responder) takes them.
	qmu     sync.Mutex
	queue   []*queuedConn
	qsig    chan struct{} // cap 1: one queued
	qdone   chan struct{} // closed with the point
	qclosed bool
	qwg     sync.WaitGroup // the queued connections' watchers

	// After a failed Shrink on the lowest survivor, a responder tells the
	// survivors still to come why (respond).
	rmu       sync.Mutex
	respStop  chan struct{}
	respDone  chan struct{}
	held      []pendingOpen // connections it keeps for the next Shrink
	closed    bool
	closeOnce sync.Once
}

// errStopped: next's stop channel closed.
var errStopped = errors.New("stopped")

// queuedConn is a connection waiting on the point. Its watcher reads
// what the dialer sends meanwhile into buf, so that a dialer that gives
// up and closes is seen and its connection dropped (a listener's queue
// held such connections in the kernel; here they would hold descriptors).
type queuedConn struct {
	a     rescueArrival
	buf   []byte
	taken bool          // by next; the watcher then stops
	done  chan struct{} // the watcher ended
}

// maxQueuedBytes bounds what a queued connection's dialer may send before
// a Shrink reads it (its opening frame, and a give-up frame).
const maxQueuedBytes = 64 << 10

// deliver queues a; false once the point closed.
func (rp *rescuePoint) deliver(a rescueArrival) bool {
	rp.qmu.Lock()
	defer rp.qmu.Unlock()
	if rp.qclosed {
		return false
	}
	q := &queuedConn{a: a, done: make(chan struct{})}
	rp.queue = append(rp.queue, q)
	rp.qwg.Add(1)
	go rp.watch(q)
	select {
	case rp.qsig <- struct{}{}:
	default:
	}
	return true
}

// watch reads q's connection until next takes it (and ends the read by
// its deadline) or the dialer closes it (then dropped).
func (rp *rescuePoint) watch(q *queuedConn) {
	defer rp.qwg.Done()
	defer close(q.done)
	var b [512]byte
	for {
		n, err := q.a.conn.Read(b[:])
		rp.qmu.Lock()
		q.buf = append(q.buf, b[:n]...)
		if q.taken {
			rp.qmu.Unlock()
			return
		}
		if err != nil || len(q.buf) > maxQueuedBytes {
			if i := slices.Index(rp.queue, q); i >= 0 {
				rp.queue = slices.Delete(rp.queue, i, i+1)
			}
			rp.qmu.Unlock()
			_ = q.a.conn.Close()
			return
		}
		rp.qmu.Unlock()
	}
}

// next takes the oldest queued connection, waiting for one until stop
// closes (errStopped: what is queued stays for the next taker) or the
// point does (net.ErrClosed). One taker at a time.
func (rp *rescuePoint) next(stop <-chan struct{}) (rescueArrival, error) {
	for {
		select {
		case <-stop:
			return rescueArrival{}, errStopped
		default:
		}
		rp.qmu.Lock()
		if rp.qclosed {
			rp.qmu.Unlock()
			return rescueArrival{}, net.ErrClosed
		}
		if len(rp.queue) > 0 {
			q := rp.queue[0]
			rp.queue[0] = nil
			rp.queue = rp.queue[1:]
			q.taken = true
			rp.qmu.Unlock()
			_ = q.a.conn.SetReadDeadline(time.Now()) // ends the watcher's read
			<-q.done
			_ = q.a.conn.SetReadDeadline(time.Time{})
			a := q.a
			if len(q.buf) > 0 {
				a.conn = &prefixConn{Conn: a.conn, pre: q.buf}
			}
			return a, nil
		}
		rp.qmu.Unlock()
		select {
		case <-rp.qsig:
		case <-rp.qdone:
		case <-stop:
		}
	}
}

// prefixConn reads pre before its connection.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// pendingOpen is a greeted rescue connection.
type pendingOpen struct {
	conn   net.Conn
	rank   int
	role   byte
	list   []int
	expiry *time.Timer // while held
}

// openRescue takes a place on hub (the parent's, for a child of Split or
// Shrink; a new listener when nil) and exchanges the addresses, node keys,
// devices and what the link ceiling needs (me: linkceil.go); collective
// (one bootstrap AllGather). Failing to listen is not fatal: the rank has
// no rescue point and a Shrink that needs it says why. A new listener is on ifIP (GOCCL_SOCKET_IFNAME's choice) when
// valid, else on the interface of the bootstrap's connections.
func openRescue(ctx context.Context, b *tcpBootstrap, hostID string, me linkSelf, ifIP netip.Addr, hub *rescueHub) (*rescuePoint, error) {
	rp := &rescuePoint{ip: bootstrapIP(b), magic: rescueMagic(b.magic), rank: b.rank,
		qsig: make(chan struct{}, 1), qdone: make(chan struct{})}
	if ifIP.IsValid() {
		rp.ip = ifIP
	}
	if b.nranks > 1 {
		if hub == nil || !hub.acquire() {
			var err error
			if hub, err = newRescueHub(rp.ip, b.log); err != nil {
				hub = nil
				rp.why = err.Error()
				b.log.Warn("goccl: no rescue listener: Shrink will not reach this rank", "rank", b.rank, "err", err)
			}
		}
		if hub != nil {
			if err := hub.register(rp.magic, rp); err != nil {
				hub.release()
				rp.why = err.Error()
			} else {
				rp.hub = hub
				b.cleanup = append(b.cleanup, rp.close)
			}
		}
	}
	addr := ""
	if rp.hub != nil {
		addr = rp.hub.addr()
	}
	key, kerr := nodeKey(hostID)
	if kerr != nil {
		// Still take part in the exchange, so that the peers fail with
		// this rank's reason rather than wait for it.
		key = "error"
		rp.why = kerr.Error()
	}
	mine := rescueInfo{node: key, device: me.device, bus: me.bus, netMbps: me.netMbps(rp.ip), addr: addr}
	all, err := b.AllGather(ctx, encodeRescueInfo(mine))
	if kerr != nil {
		return nil, kerr
	}
	if err != nil {
		return nil, fmt.Errorf("exchanging rescue addresses: %w", err)
	}
	rp.addrs = make([]string, len(all))
	rp.nodes = make([]string, len(all))
	rp.devices = make([]int, len(all))
	rp.buses = make([]string, len(all))
	rp.netMbps = make([]uint32, len(all))
	for r, x := range all {
		in, err := decodeRescueInfo(x)
		if err != nil {
			return nil, fmt.Errorf("rank %d's rescue address: %w", r, err)
		}
		rp.nodes[r], rp.devices[r], rp.buses[r], rp.netMbps[r], rp.addrs[r] = in.node, in.device, in.bus, in.netMbps, in.addr
	}
	return rp, nil
}

// bootstrapIP is this rank's address on its bootstrap connections: the
// interface through which the job's ranks already reach each other.
func bootstrapIP(b *tcpBootstrap) netip.Addr {
	for _, p := range b.peers {
		if p == nil {
			continue
		}
		if ta, ok := p.conn.LocalAddr().(*net.TCPAddr); ok {
			if a := ta.AddrPort().Addr().Unmap(); a.IsValid() && a.Zone() == "" {
				return a
			}
		}
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1})
}

// rescueMagic keeps rescue connections apart from the bootstrap's, under
// the job's secret.
func rescueMagic(magic uint64) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], magic)
	sum := sha256.Sum256(append([]byte("goccl-rescue:"), b[:]...))
	return binary.BigEndian.Uint64(sum[:8])
}

// nodeKey names this machine (topology.LocalNode: GOCCL_HOSTID when set,
// else hostname and boot id).
func nodeKey(hostID string) (string, error) {
	src := topology.OSNodeSource
	src.Getenv = func(k string) string {
		if k == "GOCCL_HOSTID" {
			return hostID
		}
		return ""
	}
	id, _, err := topology.LocalNode(src)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(id[:]), nil
}

// checkOneNode fails init when the ranks span several machines and the
// backend is a custom one: the host and GPU backends span nodes (UCX or
// NCCL between them), a backend given by a factory is told the nodes but
// is not trusted to serve them.
func checkOneNode(nodes []string, rank int) error {
	ids := nodeIDs(nodes)
	groups := topology.Nodes(ids)
	if len(groups) <= 1 {
		return nil
	}
	var parts []string
	for k, g := range groups {
		parts = append(parts, fmt.Sprintf("node %d (%s): ranks %v", k, ids[g[0]], g))
	}
	return fmt.Errorf("%w: rank %d: the ranks span %d nodes (%s); this backend reaches only the ranks of one node (the host backend spans nodes over UCX, the GPU backend over NCCL; set GOCCL_HOSTID alike on every rank if they do share one machine)",
		ErrSpansNodes, rank, len(groups), strings.Join(parts, "; "))
}

// nodeIDs reads the node keys the ranks exchanged (nodeKey's hex).
func nodeIDs(nodes []string) []topology.NodeID {
	ids := make([]topology.NodeID, 0, len(nodes))
	for _, n := range nodes {
		var id topology.NodeID
		if b, err := hex.DecodeString(n); err == nil {
			copy(id[:], b)
		} else {
			copy(id[:], n)
		}
		ids = append(ids, id)
	}
	return ids
}

// nodeLayout describes which ranks share a node, for the INFO log:
// "2 (node 0 = 3a5c1be4…: ranks 0,1; node 1 = …: ranks 2,3)".
func nodeLayout(nodes []string) string {
	ids := nodeIDs(nodes)
	groups := topology.Nodes(ids)
	parts := make([]string, len(groups))
	for k, g := range groups {
		rs := make([]string, len(g))
		for i, r := range g {
			rs[i] = strconv.Itoa(r)
		}
		parts[k] = fmt.Sprintf("node %d = %s…: ranks %s", k, ids[g[0]], strings.Join(rs, ","))
	}
	return fmt.Sprintf("%d (%s)", len(groups), strings.Join(parts, "; "))
}

// rescueInfo is what a rank tells the others at init: its node key, CUDA
// ordinal (-1 none), its GPU's PCI bus id ("" unknown) and inter-node line
// rate (Mb/s, 0 unknown), which give the link ceiling of the
// communicator's GPUs (linkceil.go), and its rescue address ("" none).
type rescueInfo struct {
	node    string
	device  int
	bus     string
	netMbps uint32
	addr    string
}

// maxBusID bounds a bus id on the wire ("0000:18:00.0" is 12 bytes).
const maxBusID = 32

// Rescue info: node length u8 | node | device+1 u16 | bus length u8 | bus
// | line rate u32 | address.
func encodeRescueInfo(in rescueInfo) []byte {
	out := append([]byte{byte(len(in.node))}, in.node...)
	out = binary.BigEndian.AppendUint16(out, uint16(in.device+1))
	out = append(out, byte(len(in.bus)))
	out = append(out, in.bus...)
	out = binary.BigEndian.AppendUint32(out, in.netMbps)
	return append(out, in.addr...)
}

func decodeRescueInfo(b []byte) (rescueInfo, error) {
	bad := fmt.Errorf("%w: rescue info of %d bytes", errMalformed, len(b))
	if len(b) < 1 || len(b) > 1+255+2+1+maxBusID+4+64 {
		return rescueInfo{}, bad
	}
	n := int(b[0])
	if len(b) < 1+n+2+1 {
		return rescueInfo{}, bad
	}
	var in rescueInfo
	in.node, in.device = string(b[1:1+n]), int(binary.BigEndian.Uint16(b[1+n:]))-1
	rest := b[1+n+2:]
	bl := int(rest[0])
	if bl > maxBusID || len(rest) < 1+bl+4 {
		return rescueInfo{}, bad
	}
	in.bus, in.netMbps, in.addr = string(rest[1:1+bl]), binary.BigEndian.Uint32(rest[1+bl:]), string(rest[1+bl+4:])
	if in.addr != "" {
		if _, err := netip.ParseAddrPort(in.addr); err != nil {
			return rescueInfo{}, fmt.Errorf("%w: rescue address %q", errMalformed, printable([]byte(in.addr)))
		}
	}
	return in, nil
}

// localRanks numbers each rank of members (parent ranks, in the child's
// order) among the members on its node.
func (rp *rescuePoint) localRanks(members []int) []int {
	seen := map[string]int{}
	out := make([]int, len(members))
	for i, r := range members {
		out[i] = seen[rp.nodes[r]]
		seen[rp.nodes[r]]++
	}
	return out
}

// respond serves, in the background, each of expected (parent ranks)
// that dials in after the failed Shrink: its connection is held for the
// next Shrink, or answered with verdict (a reject payload) after holdFor,
// until all have dialled, the next Shrink starts or the communicator
// closes. Answering at once would give a survivor that already tries again
// the failed attempt's verdict.
func (rp *rescuePoint) respond(c *Comm, verdict []byte, expected, list []int) {
	if len(expected) == 0 || verdict == nil || rp.hub == nil {
		return
	}
	rp.rmu.Lock()
	defer rp.rmu.Unlock()
	if rp.closed {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	rp.respStop, rp.respDone = stop, done
	want := map[int]bool{}
	for _, r := range expected {
		want[r] = true
	}
	go func() {
		defer close(done)
		for len(want) > 0 {
			a, err := rp.next(stop)
			if err != nil {
				return // stopResponder, or closed
			}
			conn := a.conn
			rank, role, theirs, err := readOpening(c, conn, a.hello)
			switch {
			case err != nil:
				_ = conn.Close()
			case want[rank] && slices.Equal(theirs, list):
				// A late survivor of the failed Shrink, or one already
				// trying again with the same list: they cannot be told
				// apart. Held, it joins this rank's next Shrink if one
				// starts within holdFor, else hears the verdict then.
				rp.hold(pendingOpen{conn: conn, rank: rank, role: role, list: theirs}, verdict)
				delete(want, rank)
			default:
				rp.hold(pendingOpen{conn: conn, rank: rank, role: role, list: theirs}, verdict)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
}

// holdFor bounds how long a connection waits for this rank's next
// Shrink; then its dialer hears the answer it was kept from.
const holdFor = 5 * time.Second

// hold keeps p for the next Shrink; if none starts within holdFor, p's
// dialer gets answer (a reject payload). Closed with the communicator.
func (rp *rescuePoint) hold(p pendingOpen, answer []byte) {
	rp.rmu.Lock()
	defer rp.rmu.Unlock()
	if rp.closed {
		_ = p.conn.Close()
		return
	}
	p.expiry = time.AfterFunc(holdFor, func() {
		rp.rmu.Lock()
		defer rp.rmu.Unlock()
		for i, h := range rp.held {
			if h.conn == p.conn {
				rp.held = slices.Delete(rp.held, i, i+1)
				_ = writeOnce(p.conn, kindReject, answer)
				_ = p.conn.Close()
				return
			}
		}
	})
	rp.held = append(rp.held, p)
}

// stopResponder ends the responder and returns the connections it held.
func (rp *rescuePoint) stopResponder() []pendingOpen {
	rp.rmu.Lock()
	stop, done := rp.respStop, rp.respDone
	rp.respStop, rp.respDone = nil, nil
	rp.rmu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	rp.rmu.Lock()
	defer rp.rmu.Unlock()
	held := rp.held
	rp.held = nil
	for _, h := range held {
		h.expiry.Stop() // one that fires now finds nothing held
	}
	return held
}

// close is the bootstrap's cleanup: the place on the hub (released, the
// hub's listener closing with its last place), the queued connections,
// the responder and what it held.
func (rp *rescuePoint) close() {
	rp.closeOnce.Do(func() {
		rp.rmu.Lock()
		rp.closed = true
		done := rp.respDone
		rp.rmu.Unlock()
		if rp.hub != nil {
			rp.hub.unregister(rp.magic, rp.rank)
		}
		rp.qmu.Lock()
		rp.qclosed = true
		close(rp.qdone)
		queued := rp.queue
		rp.queue = nil
		rp.qmu.Unlock()
		for _, q := range queued {
			_ = q.a.conn.Close() // ends its watcher
		}
		rp.qwg.Wait()
		if done != nil {
			<-done
		}
		rp.rmu.Lock()
		for _, p := range rp.held {
			p.expiry.Stop()
			_ = p.conn.Close()
		}
		rp.held = nil
		rp.rmu.Unlock()
		if rp.hub != nil {
			rp.hub.release()
		}
	})
}

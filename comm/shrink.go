package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/goccl/goccl/collectives"
)

// Shrink makes a communicator of the ranks not in exclude, numbered in
// parent order, as ncclCommShrink. It works after the parent aborted (a
// rank died), so that a job can go on without it. Every surviving rank
// calls it with the same exclude list (in any order); the excluded ranks
// do not call it. Call it before closing the parent. The child has its
// own bootstrap and backend, with the parent's settings (opts' non-zero
// fields override them, as for Split); the parent is left as it was.
//
// Shrink does not use the parent's bootstrap, which may be gone with its
// rank 0: every rank has a place on a rescue listener from init and
// learned every other rank's (rescue.go; a child's is its parent's). The survivors meet at the lowest surviving
// rank's, which then hands them a fresh unique id for the child, and the
// child forms as init does. A survivor that names a different exclude
// list, a survivor that is in fact dead (its listener refuses), or a bad
// list (an unknown rank, a repeat, this rank itself) gives an error naming
// it rather than a hang; a survivor that never calls Shrink is waited for
// until the parent's init timeout (or ctx). Ranks in errors are the
// parent's.
func (c *Comm) Shrink(ctx context.Context, exclude []int, opts Options) (*Comm, error) {
	wrap := func(err error) error { return fmt.Errorf("goccl: rank %d: Shrink: %w", c.rank, err) }
	if c.closed.Load() || c.rescue == nil {
		return nil, wrap(collectives.ErrClosed)
	}
	set, err := c.childSettings(opts)
	if err != nil {
		return nil, wrap(err)
	}
	ex, err := checkExclude(exclude, c.rank, c.size)
	if err != nil {
		return nil, wrap(err)
	}
	var survivors []int
	for r := 0; r < c.size; r++ {
		if _, found := slices.BinarySearch(ex, r); !found {
			survivors = append(survivors, r)
		}
	}
	me := slices.Index(survivors, c.rank)
	rp := c.rescue
	rp.mu.Lock()
	defer rp.mu.Unlock()
	spec := joinSpec{nranks: len(survivors), rank: me, localRank: rp.localRanks(survivors)[me], hub: rp.hub}
	if len(survivors) == 1 {
		spec.id, err = newUniqueIDAt(netip.AddrPortFrom(rp.ip, 1)) // never dialled
	} else {
		sctx, cancel := context.WithTimeout(ctx, set.timeout)
		s := &shrinker{c: c, rp: rp, ex: ex, survivors: survivors, leader: survivors[0], events: make(chan shrinkEvent), stop: make(chan struct{})}
		spec.id, spec.ln, err = s.run(sctx)
		cancel()
	}
	if err != nil {
		return nil, wrap(err)
	}
	spec.token = spec.id.Token()
	if spec.ln != nil {
		defer spec.ln.Close() // taken over by the child's bootstrap; closing twice is harmless
	}
	child, err := initResolved(ctx, spec, set)
	if err != nil {
		return nil, wrap(err)
	}
	return child, nil
}

// checkExclude validates an exclude list and returns it sorted.
func checkExclude(exclude []int, self, size int) ([]int, error) {
	first := map[int]int{}
	for i, r := range exclude {
		switch {
		case r < 0 || r >= size:
			return nil, fmt.Errorf("%w: exclude[%d]=%d is not a rank of this communicator (ranks 0..%d)", collectives.ErrInvalidPeer, i, r, size-1)
		case r == self:
			return nil, fmt.Errorf("%w: exclude[%d]=%d is this rank: a rank leaving the communicator does not call Shrink", collectives.ErrInvalidPeer, i, r)
		}
		if j, dup := first[r]; dup {
			return nil, fmt.Errorf("%w: exclude[%d]=%d repeats exclude[%d]", collectives.ErrInvalidArgument, i, r, j)
		}
		first[r] = i
	}
	ex := slices.Clone(exclude)
	slices.Sort(ex)
	return ex, nil
}

// The rescue protocol. A connection opens with the bootstrap's hello
// (the rescue magic, the parent's size, the sender's parent rank and pid,
// checked against the parent's records), then one frame from the dialer:
// kindContrib, payload role u8 | n u32 | n sorted excluded ranks u32.
// The answers reuse the bootstrap's frame kinds: kindHeartbeat accepts,
// kindReject refuses (code and message, as at init), kindWelcome carries
// the child's unique id, and kindFailed goes from a survivor to the
// lowest survivor when the survivor gives up.
//
// Each survivor dials the lowest survivor in its own view (role join).
// The lowest survivor also dials each of the others (role probe): that
// finds at once a survivor that is dead (refused) or that names another
// list and so waits elsewhere. Every survivor accepts on its rescue
// listener while in Shrink and answers a list other than its own with a
// mismatch, which fails both ends.
const (
	roleJoin  = 1
	roleProbe = 2
)

// staleWait is how long an acceptor reads after a hello whose list is not
// its own: a connection queued by an earlier, finished Shrink has been
// closed by its dialer (EOF at once) and must not fail this one; a live
// dialer sends nothing more.
const staleWait = 50 * time.Millisecond

type shrinkEvent struct {
	kind     int
	rank     int
	conn     net.Conn
	role     byte
	list     []int
	err      error
	hdr      frameHeader
	payload  []byte
	deferred bool // an arrival judged once already (see judge)
}

const (
	evArrival  = iota // a hello on our listener
	evLost            // a survivor's join connection ended
	evFailed          // a survivor said it gave up
	evProbe           // a probe's conclusive answer (err)
	evLeader          // a frame (or error) from the lowest survivor
	evListener        // our listener failed (the communicator closed)
)

type shrinker struct {
	c         *Comm
	rp        *rescuePoint
	ex        []int
	survivors []int
	leader    int
	events    chan shrinkEvent
	stop      chan struct{}
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     map[net.Conn]*connInfo // settled when Shrink's rendezvous ends
	stopped   bool                   // the rendezvous is over
	verdict   []byte                 // why it failed, as a reject payload
	told      map[int]bool           // survivors that heard the verdict
	settled   map[int]bool           // survivors that will not wait on this one (dead, or gave up)
}

// connInfo is what the rendezvous knows of a connection.
type connInfo struct {
	open     *pendingOpen // who dialled us, with what; nil for one we dialled
	answered bool         // the rendezvous replied on it
}

// supersetGrace is how long a survivor waits before it calls a list that
// excludes more than its own a mismatch. Such a list is often a later
// Shrink's: another rank died during the recovery, a survivor saw it
// first and tries again without it, and this rank, about to see it too,
// gives that connection to its own next Shrink instead.
const supersetGrace = 2 * time.Second

// run meets the other survivors and returns the child's id (and, on the
// lowest survivor, the child's bootstrap listener).
func (s *shrinker) run(ctx context.Context) (id UniqueID, ln net.Listener, err error) {
	if s.rp.hub == nil {
		return UniqueID{}, nil, fmt.Errorf("this rank has no rescue listener (%s)", s.rp.why)
	}
	s.told, s.settled = map[int]bool{}, map[int]bool{}
	held := s.rp.stopResponder()
	ctx, cancel := context.WithCancel(ctx) // ends the probes' dials with the rendezvous
	s.wg.Add(1)
	go s.acceptLoop(held)
	defer func() {
		cancel()
		// Every connection not answered yet is settled: see settle.
		s.mu.Lock()
		if err != nil {
			s.verdict = shrinkRejectPayload(err)
		}
		s.stopped = true
		close(s.stop) // ends acceptLoop; what is queued stays for a later Shrink
		for conn, info := range s.conns {
			if info.open != nil && !info.answered {
				s.settle(conn, info.open)
			} else {
				_ = conn.Close()
			}
		}
		s.conns = nil
		s.mu.Unlock()
		s.wg.Wait()
		if err != nil && s.c.rank == s.leader {
			// Survivors still on their way would otherwise wait in our
			// listener's queue for their whole timeout.
			var expected []int
			for _, r := range s.survivors[1:] {
				if !s.told[r] && !s.settled[r] {
					expected = append(expected, r)
				}
			}
			s.rp.respond(s.c, s.verdict, expected, s.ex)
		}
	}()
	if s.c.rank == s.leader {
		return s.lead(ctx)
	}
	id, err = s.follow(ctx)
	return id, nil, err
}

// track registers conn (open: what its dialer said; nil for a connection
// we dialled) for settling at the end; false (conn settled) when the
// rendezvous is over.
func (s *shrinker) track(conn net.Conn, open *pendingOpen) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		if open != nil {
			s.settle(conn, open)
		} else {
			_ = conn.Close()
		}
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]*connInfo{}
	}
	s.conns[conn] = &connInfo{open: open}
	return true
}

// answered records that the rendezvous replied on conn.
func (s *shrinker) answered(conn net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if info := s.conns[conn]; info != nil {
		info.answered = true
	}
}

// settle answers, once the rendezvous is over, a survivor's connection it
// did not: one with our list hears why we gave up (nothing when we did
// not); one whose list excludes more than ours may be a later attempt
// (we failed, or its dialer is one of ours) and is kept a while for our
// next Shrink; any other is told of the mismatch. Called under s.mu.
func (s *shrinker) settle(conn net.Conn, o *pendingOpen) {
	mismatch := shrinkRejectPayload(s.mismatch(o.rank, o.list))
	switch {
	case slices.Equal(o.list, s.ex):
		if s.verdict != nil {
			_ = writeOnce(conn, kindReject, s.verdict)
			s.told[o.rank] = true
		}
		_ = conn.Close()
	case supersetOf(o.list, s.ex) && s.verdict != nil:
		s.rp.hold(*o, s.verdict)
	case supersetOf(o.list, s.ex) && slices.Contains(s.survivors, o.rank):
		s.rp.hold(*o, mismatch)
	default:
		_ = writeOnce(conn, kindReject, mismatch)
		_ = conn.Close()
	}
}

// supersetOf reports whether a excludes every rank b does, and more.
func supersetOf(a, b []int) bool {
	if len(a) <= len(b) {
		return false
	}
	for _, r := range b {
		if _, ok := slices.BinarySearch(a, r); !ok {
			return false
		}
	}
	return true
}

// judge decides on an arrival whose list is not ours: false when it was
// deferred (see supersetGrace); true when it is a mismatch now, the
// dialer having been told.
func (s *shrinker) judge(ev shrinkEvent) bool {
	if !ev.deferred && supersetOf(ev.list, s.ex) {
		ev.deferred = true
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			t := time.NewTimer(supersetGrace)
			defer t.Stop()
			select {
			case <-t.C:
				s.send(ev)
			case <-s.stop:
			}
		}()
		return false
	}
	s.answered(ev.conn)
	_ = writeOnce(ev.conn, kindReject, shrinkRejectPayload(s.mismatch(ev.rank, ev.list)))
	return true
}

// admit takes an arrival into the rendezvous: true when its list is ours
// (the arrival then answered); false with the mismatch when judge finds
// one; false alone when judge deferred it.
func (s *shrinker) admit(ev shrinkEvent) (bool, error) {
	if slices.Equal(ev.list, s.ex) {
		s.answered(ev.conn)
		return true, nil
	}
	if s.judge(ev) {
		return false, s.mismatch(ev.rank, ev.list)
	}
	return false, nil
}

// send hands ev to the rendezvous, or drops it once that is over (its
// connection, tracked, is closed by the end).
func (s *shrinker) send(ev shrinkEvent) {
	select {
	case s.events <- ev:
	case <-s.stop:
	}
}

func (s *shrinker) acceptLoop(held []pendingOpen) {
	defer s.wg.Done()
	// Connections a failed Shrink's responder held for this one.
	for _, p := range held {
		if !slices.Equal(p.list, s.ex) && stale(p.conn) {
			_ = p.conn.Close()
			continue
		}
		s.arrive(p)
	}
	for {
		a, err := s.rp.next(s.stop)
		if err != nil {
			if !errors.Is(err, errStopped) {
				s.send(shrinkEvent{kind: evListener, err: err})
			}
			return
		}
		// Tracked once greeted: a stranger is dropped by its own deadline.
		s.wg.Add(1)
		go s.greet(a)
	}
}

// greet reads a dialer's list (the hub read its hello); strangers are
// dropped quietly.
func (s *shrinker) greet(a rescueArrival) {
	defer s.wg.Done()
	conn := a.conn
	rank, role, list, err := readOpening(s.c, conn, a.hello)
	if err == nil && !slices.Equal(list, s.ex) && stale(conn) {
		err = errors.New("closed by its dialer (a finished Shrink)")
	}
	if err != nil {
		s.c.log.Debug("goccl: dropped a connection on the rescue listener", "rank", s.c.rank, "remote", conn.RemoteAddr().String(), "why", err)
		_ = conn.Close()
		return
	}
	s.arrive(pendingOpen{conn: conn, rank: rank, role: role, list: list})
}

// arrive hands a greeted connection to the rendezvous.
func (s *shrinker) arrive(p pendingOpen) {
	if !s.track(p.conn, &p) {
		return
	}
	s.send(shrinkEvent{kind: evArrival, rank: p.rank, conn: p.conn, role: p.role, list: p.list})
}

// readOpening checks a rescue connection's hello (read by the hub, with
// this communicator's magic) and reads its list within helloTimeout.
func readOpening(c *Comm, conn net.Conn, h hello) (rank int, role byte, list []int, err error) {
	if err := checkRescueHello(c, h); err != nil {
		return 0, 0, nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	var hdr [frameHeaderSize]byte
	fh, payload, err := readFrame(conn, hdr[:])
	if err == nil && fh.Kind != kindContrib {
		err = fmt.Errorf("%w: %s frame opens a rescue connection", errMalformed, kindNames[fh.Kind])
	}
	if err == nil {
		role, list, err = decodeShrinkOpen(payload, c.size)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return int(h.Rank), role, list, err
}

func checkRescueHello(c *Comm, h hello) error {
	switch {
	case h.Version != protocolVersion:
		return fmt.Errorf("protocol version %d", h.Version)
	case int64(h.NRanks) != int64(c.size):
		return fmt.Errorf("nranks %d", h.NRanks)
	case int64(h.Rank) >= int64(c.size) || int(h.Rank) == c.rank:
		return fmt.Errorf("rank %d", h.Rank)
	case pidOf(c, int(h.Rank)) != int32(h.PID):
		return fmt.Errorf("pid %d claims rank %d, whose pid is %d", h.PID, h.Rank, pidOf(c, int(h.Rank)))
	}
	return nil
}

func pidOf(c *Comm, r int) int32 {
	if r < len(c.boot.pids) {
		return c.boot.pids[r]
	}
	return -1
}

// stale reports whether the dialer has already closed conn.
func stale(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(staleWait))
	var b [1]byte
	_, err := conn.Read(b[:])
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// dial opens a rescue connection to parent rank r with role.
func (s *shrinker) dial(ctx context.Context, r int, role byte) (net.Conn, error) {
	addr := s.rp.addrs[r]
	if addr == "" {
		return nil, &collectives.PeerError{Rank: r, Cause: errors.New("has no rescue listener (it could not listen at init): Shrink cannot reach it")}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, &collectives.PeerError{Rank: r, Cause: fmt.Errorf("refused the rescue connection at %s: it died or closed its communicator (a dead rank belongs in exclude): %w", addr, err)}
		}
		return nil, err
	}
	if !s.track(conn, nil) {
		return nil, net.ErrClosed
	}
	h := encodeHello(hello{Magic: s.rp.magic, Version: protocolVersion, NRanks: uint32(s.c.size), Rank: uint32(s.c.rank), PID: uint32(os.Getpid())})
	msg := append(h[:], appendFrame(nil, kindContrib, 0, encodeShrinkOpen(role, s.ex))...)
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write(msg); err != nil {
		return nil, &collectives.PeerError{Rank: r, Cause: fmt.Errorf("rescue connection: %w", err)}
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// mismatch is the error both ends of a disagreement return.
func (s *shrinker) mismatch(r int, list []int) error {
	return fmt.Errorf("%w: rank %d passed exclude %v, rank %d passed exclude %v", ErrMismatch, r, list, s.c.rank, s.ex)
}

// lead is the lowest survivor's side: it gathers every other survivor,
// then gives them the child's id.
func (s *shrinker) lead(ctx context.Context) (UniqueID, net.Listener, error) {
	joined := map[int]net.Conn{}
	fail := func(err error) (UniqueID, net.Listener, error) {
		msg := shrinkRejectPayload(err)
		for r, conn := range joined {
			_ = writeOnce(conn, kindReject, msg)
			s.told[r] = true
		}
		return UniqueID{}, nil, err
	}
	for _, r := range s.survivors[1:] {
		s.wg.Add(1)
		go s.probe(ctx, r)
	}
	for len(joined) < len(s.survivors)-1 {
		select {
		case ev := <-s.events:
			switch ev.kind {
			case evArrival:
				ours, err := s.admit(ev)
				if err != nil {
					return fail(err)
				}
				if !ours {
					continue
				}
				if ev.role != roleJoin {
					_ = ev.conn.Close()
					continue
				}
				if old := joined[ev.rank]; old != nil {
					_ = old.Close()
				}
				joined[ev.rank] = ev.conn
				_ = writeOnce(ev.conn, kindHeartbeat, nil)
				s.wg.Add(1)
				go s.watch(ev.rank, ev.conn)
			case evLost:
				if joined[ev.rank] == ev.conn {
					delete(joined, ev.rank)
					s.wg.Add(1)
					go s.probe(ctx, ev.rank) // dead, or a closed stale connection?
				}
			case evFailed:
				s.settled[ev.rank] = true
				return fail(&collectives.PeerError{Rank: ev.rank, Cause: ev.err})
			case evProbe:
				s.settled[ev.rank] = true
				return fail(ev.err)
			case evListener:
				return fail(fmt.Errorf("rescue listener: %w", ev.err))
			}
		case <-ctx.Done():
			var missing []int
			for _, r := range s.survivors[1:] {
				if joined[r] == nil {
					missing = append(missing, r)
				}
			}
			return fail(fmt.Errorf("%w: ranks %v did not join the Shrink within the timeout (do they call it, with exclude %v?): %v", collectives.ErrTimeout, missing, s.ex, ctx.Err()))
		}
	}
	id, ln, err := s.c.newChildID(len(s.survivors), false)
	if err != nil {
		return fail(err)
	}
	for r, conn := range joined {
		if err := writeOnce(conn, kindWelcome, id[:]); err != nil {
			s.c.log.Warn("goccl: Shrink: could not send the new id", "rank", s.c.rank, "peer", r, "err", err)
		}
	}
	return id, ln, nil
}

// watch reads a joined survivor's connection until it ends or says it
// gave up.
func (s *shrinker) watch(r int, conn net.Conn) {
	defer s.wg.Done()
	var hdr [frameHeaderSize]byte
	h, payload, err := readFrame(conn, hdr[:])
	if err == nil && h.Kind == kindFailed {
		if _, msg, derr := decodeFailed(payload, s.c.size); derr == nil {
			s.send(shrinkEvent{kind: evFailed, rank: r, err: errors.New(msg)})
			return
		}
	}
	s.send(shrinkEvent{kind: evLost, rank: r, conn: conn})
}

// probe dials survivor r; only a conclusive answer (refused, or another
// list) becomes an event. A survivor not yet in Shrink answers when it
// gets there.
func (s *shrinker) probe(ctx context.Context, r int) {
	defer s.wg.Done()
	conn, err := s.dial(ctx, r, roleProbe)
	if err != nil {
		var pe *collectives.PeerError
		if errors.As(err, &pe) {
			s.send(shrinkEvent{kind: evProbe, rank: r, err: err})
		}
		return
	}
	var hdr [frameHeaderSize]byte
	h, payload, err := readFrame(conn, hdr[:])
	if err == nil && h.Kind == kindReject {
		s.send(shrinkEvent{kind: evProbe, rank: r, err: shrinkRejection(payload, r)})
	}
}

// follow is every other survivor's side.
func (s *shrinker) follow(ctx context.Context) (UniqueID, error) {
	conn, err := s.dial(ctx, s.leader, roleJoin)
	if err != nil {
		if ctx.Err() != nil {
			return UniqueID{}, fmt.Errorf("%w: rank %d not reached: %v", collectives.ErrTimeout, s.leader, err)
		}
		return UniqueID{}, err
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var hdr [frameHeaderSize]byte
		for {
			h, payload, err := readFrame(conn, hdr[:])
			s.send(shrinkEvent{kind: evLeader, hdr: h, payload: payload, err: err})
			if err != nil || h.Kind != kindHeartbeat {
				return
			}
		}
	}()
	giveUp := func(err error) (UniqueID, error) {
		_ = writeOnce(conn, kindFailed, encodeFailed(s.c.rank, errorDetail(err)))
		return UniqueID{}, err
	}
	acked := false
	expired := ctx.Done()
	var grace <-chan time.Time
	for {
		select {
		case ev := <-s.events:
			switch ev.kind {
			case evArrival:
				ours, err := s.admit(ev)
				if err != nil {
					return giveUp(err)
				}
				if !ours {
					continue
				}
				if ev.role == roleProbe {
					_ = writeOnce(ev.conn, kindHeartbeat, nil)
				}
				_ = ev.conn.Close()
			case evLeader:
				switch {
				case ev.err != nil && acked:
					return UniqueID{}, &collectives.PeerError{Rank: s.leader, Cause: fmt.Errorf("lost during Shrink: %w", ev.err)}
				case ev.err != nil:
					return UniqueID{}, &collectives.PeerError{Rank: s.leader, Cause: fmt.Errorf("closed the rescue connection without an answer: %w", ev.err)}
				case ev.hdr.Kind == kindHeartbeat:
					acked = true
				case ev.hdr.Kind == kindWelcome:
					return uniqueIDFromBytes(ev.payload)
				case ev.hdr.Kind == kindReject:
					return UniqueID{}, shrinkRejection(ev.payload, s.leader)
				default:
					return UniqueID{}, &collectives.PeerError{Rank: s.leader, Cause: fmt.Errorf("%w: %s frame in Shrink", errMalformed, kindNames[ev.hdr.Kind])}
				}
			case evListener:
				return giveUp(fmt.Errorf("rescue listener: %w", ev.err))
			}
		case <-expired:
			// Once the lowest survivor has us, it knows which ranks are
			// missing: give it a little longer to say so.
			expired = nil
			if acked {
				grace = time.After(rejectGrace)
				continue
			}
			return giveUp(fmt.Errorf("%w: rank %d did not answer within the timeout (does it call Shrink, with exclude %v?): %v", collectives.ErrTimeout, s.leader, s.ex, ctx.Err()))
		case <-grace:
			return giveUp(fmt.Errorf("%w: rank %d did not gather the survivors within the timeout", collectives.ErrTimeout, s.leader))
		}
	}
}

// Rescue payloads.

func encodeShrinkOpen(role byte, ex []int) []byte {
	b := binary.BigEndian.AppendUint32([]byte{role}, uint32(len(ex)))
	for _, r := range ex {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

func decodeShrinkOpen(b []byte, size int) (byte, []int, error) {
	if len(b) < 5 || (b[0] != roleJoin && b[0] != roleProbe) {
		return 0, nil, fmt.Errorf("%w: rescue opening of %d bytes", errMalformed, len(b))
	}
	n := binary.BigEndian.Uint32(b[1:])
	if uint64(n) >= uint64(size) || uint64(len(b)) != 5+4*uint64(n) {
		return 0, nil, fmt.Errorf("%w: rescue opening lists %d ranks in %d bytes", errMalformed, n, len(b))
	}
	ex := make([]int, n)
	for i := range ex {
		ex[i] = int(binary.BigEndian.Uint32(b[5+4*i:]))
		if ex[i] >= size || (i > 0 && ex[i] <= ex[i-1]) {
			return 0, nil, fmt.Errorf("%w: rescue opening: exclude list not sorted ranks of %d", errMalformed, size)
		}
	}
	return b[0], ex, nil
}

// shrinkRejectPayload carries err so that the receiver rebuilds it with
// the same sentinel and text.
func shrinkRejectPayload(err error) []byte {
	var pe *collectives.PeerError
	var out []byte
	switch {
	case errors.Is(err, ErrMismatch):
		out = []byte{rejectMismatch}
	case errors.Is(err, collectives.ErrTimeout):
		out = []byte{rejectTimeout}
	case errors.As(err, &pe):
		return append([]byte{rejectPeer}, encodeFailed(pe.Rank, pe.Cause.Error())...)
	default:
		out = []byte{rejectOther}
	}
	msg := errorDetail(err)
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	return append(out, msg...)
}

// shrinkRejection rebuilds a reject from parent rank from.
func shrinkRejection(payload []byte, from int) error {
	if len(payload) > 0 && payload[0] == rejectOther {
		msg, err := decodeReject(payload[1:])
		if err != nil {
			return &collectives.PeerError{Rank: from, Cause: err}
		}
		return fmt.Errorf("rank %d gave up the Shrink: %s", from, msg)
	}
	err := rejection(payload)
	var pe *collectives.PeerError
	if errors.Is(err, ErrMismatch) || errors.Is(err, collectives.ErrTimeout) || errors.As(err, &pe) {
		return err
	}
	return &collectives.PeerError{Rank: from, Cause: err}
}

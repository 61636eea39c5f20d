package recorder

import (
	"sync"
	"sync/atomic"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/release"
)

// DefaultSize is the number of calls a ring keeps unless told otherwise.
const DefaultSize = 2000

// Config describes the communicator a ring records.
type Config struct {
	Size int // entries kept; <= 0 turns the recorder off (New returns nil)
	// Async is set for backends whose Run enqueues work and returns
	// (GPUs): calls stay Enqueued until Complete gives their GPU timestamps.
	Async bool
	Meta  Meta
}

// Meta is what a record says about its communicator.
type Meta struct {
	Comm      string `json:"comm"` // the communicator's id, alike on every rank
	Rank      int    `json:"rank"`
	Size      int    `json:"size"`
	PID       int    `json:"pid"`
	Host      string `json:"host"`
	Backend   string `json:"backend"`
	Algo      string `json:"algo,omitempty"`      // forced algorithm, "" when chosen per call
	Transport string `json:"transport,omitempty"` // forced transport
	// LinkGBs is the nominal bandwidth per direction of the slowest link
	// between the node's GPUs (goccl info's), 0 when unknown (the host
	// backend, one GPU, PCIe).
	LinkGBs float64 `json:"link_gbps,omitempty"`
}

// Ring is one communicator's flight recorder. Begin and End are called by
// the one goroutine issuing calls (the writer); Snapshot, Stats and
// Complete from any. A nil *Ring records nothing (the recorder is off).
//
// On the host (a synchronous ring) the writer takes no lock: it writes a
// call's entry in place and publishes it with one release store of pub
// after Begin and one after End (internal/release: a plain store on
// x86-64, where sync/atomic's is a full barrier). Readers take mu, read pub, and read the
// last Size calls up to the one it names, not the End's fields of a call
// not yet over. The writer takes mu once every spare calls, to count the
// finished calls into the statistics (count), and writes without it only
// the spare calls after the last count; so the slots it writes and those
// a reader holding mu reads never meet: the ring has Size+spare slots.
// Asynchronous rings (GPUs) take mu for every change.
type Ring struct {
	mu   sync.Mutex
	ents []entry // size+spare slots; call id in ents[id%len(ents)]
	size uint64  // the calls a record keeps (Config.Size)
	// The writer's own: n calls recorded so far (the next id is n+1), in
	// slot pos; n when it last counted.
	n, pos, counts uint64
	// pub is the newest call's id shifted left by one, bit 0 set once
	// its End's fields are written.
	pub     atomic.Uint64
	counted uint64 // calls up to this id are in stats (if finished); under mu
	async   bool
	nranks  int64
	clk     *clock
	meta    Meta
	stats   stats
	// names are the algorithms' and transports' names the calls took,
	// which entries keep as indexes (1 + position; 0: none); under mu.
	names []string
	// last is the path of the last call and its indexes: calls mostly
	// take the path the one before took. The writer's own.
	last      collectives.Path
	lastCodes [2]uint8
}

// spare is how many calls the writer records between two counts, and the
// ring's slots beyond its size.
const spare = 64

// maxNames bounds Ring.names; a name beyond is not kept.
const maxNames = 64

// entry is one call, in ticks. It holds no pointer, so the ring costs the
// garbage collector nothing to scan.
type entry struct {
	entryBegin
	entryEnd
}

// entryBegin is what Begin writes.
type entryBegin struct {
	id           uint64 // 1, 2, ... per ring; 0 for an empty slot
	seq          uint64 // the communicator's call number (0: unnumbered)
	last         uint64 // a group's last collective's number, when it has several
	count        int64
	bytes        int64 // nccl-tests' size of the call, for bandwidth
	stream       uintptr
	enq, beg     int64 // ticks; 0 unknown
	peer         int32 // peer or root; -1 none
	ops          int32 // a group's operations
	sends, recvs int32 // a group's Sends and Recvs
	// The peers of a group's Sends and Recvs, a bit per rank below 64;
	// far's bit 0 (1) says some Send's (Recv's) peer is beyond.
	sendTo, recvFrom uint64
	far              uint8
	// dev is the device's start (ns) of the times taken, and runs how many
	// different runs of the call Resolve saw: a captured graph's replays
	// rewrite one call's times. Where runs > 0, beg and fin are the
	// device's wall-clock nanoseconds, not ticks.
	dev   int64
	runs  uint32
	kind  Kind
	dtype int8
	op    int8
}

// entryEnd is what End writes (and Begin clears).
type entryEnd struct {
	fin             int64 // ticks; 0 unknown
	algo, transport uint8 // Ring.names indexes
	state           State
}

// New makes a ring; nil when cfg.Size <= 0.
func New(cfg Config) *Ring {
	if cfg.Size <= 0 {
		return nil
	}
	r := &Ring{ents: make([]entry, cfg.Size+spare), size: uint64(cfg.Size), async: cfg.Async, nranks: int64(max(cfg.Meta.Size, 1)),
		clk: getClock(), meta: cfg.Meta}
	r.stats.nranks = max(cfg.Meta.Size, 1)
	return r
}

// Meta returns what the ring was told about its communicator.
func (r *Ring) Meta() Meta {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.meta
}

// SetLink gives the ring the bandwidth ceiling of the links between its
// ranks (GB/s per direction, 0 unknown), which its statistics compare the
// bus bandwidth with.
func (r *Ring) SetLink(gbs float64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.meta.LinkGBs = gbs
	r.mu.Unlock()
}

// Begin records a collective about to run and returns its id for End.
func (r *Ring) Begin(a *collectives.Args) uint64 {
	if r == nil {
		return 0
	}
	t := r.clk.read()
	e := r.open()
	// Cleared, then written field by field: a literal is built on the
	// stack from byte-sized stores and copied with wide loads, which
	// stall waiting for those stores.
	e.entryBegin = entryBegin{}
	bytes := int64(a.Count) * int64(a.Type.Size())
	e.id, e.seq, e.count, e.stream, e.enq = r.n, a.Seq, int64(a.Count), a.Stream, t
	e.peer, e.kind, e.dtype, e.op = -1, Kind(a.Coll), int8(a.Type), int8(a.Op)
	switch a.Coll {
	case collectives.AllGather, collectives.ReduceScatter:
		bytes *= r.nranks
	case collectives.Broadcast, collectives.Reduce:
		e.peer = int32(a.Root)
	}
	e.bytes = bytes
	r.publishBegin(e, t)
	return r.n
}

// open takes the slot of call n+1 for Begin, which publishes it with
// publishBegin; an asynchronous ring's mu is held from one to the other.
func (r *Ring) open() *entry {
	switch {
	case r.async:
		r.mu.Lock()
	case r.n-r.counts >= spare:
		r.mu.Lock()
		r.count()
		r.mu.Unlock()
		r.counts = r.n
	}
	r.n++
	if r.pos++; r.pos == uint64(len(r.ents)) {
		r.pos = 0
	}
	return &r.ents[r.pos]
}

func (r *Ring) publishBegin(e *entry, t int64) {
	if r.async {
		e.entryEnd = entryEnd{state: Enqueued}
		r.pub.Store(r.n<<1 | 1)
		r.mu.Unlock()
		return
	}
	e.beg, e.entryEnd = t, entryEnd{state: Started}
	release.Uint64(&r.pub, r.n<<1)
}

// count adds the synchronous ring's calls over since the last count to
// the statistics; mu is held.
func (r *Ring) count() {
	if r.async {
		return // Complete and Resolve count the device's times
	}
	v := r.pub.Load()
	last := v >> 1
	if v&1 == 0 && last > 0 {
		last--
	}
	slots := uint64(len(r.ents))
	for id, i := r.counted+1, (r.counted+1)%slots; id <= last; id++ {
		if e := &r.ents[i]; e.id == id && e.state == Finished {
			r.stats.add(e.kind, e.bytes, ns(e.fin-e.beg, r.clk.mul))
		}
		if i++; i == slots {
			i = 0
		}
	}
	r.counted = max(r.counted, last)
}

// BeginGroup records a group (or a Send, Recv, AllToAll... issued as one)
// about to run and returns its id for End.
func (r *Ring) BeginGroup(g *collectives.Group) uint64 {
	if r == nil {
		return 0
	}
	t := r.clk.read()
	e := r.open()
	e.entryBegin = entryBegin{id: r.n, seq: g.Seq, enq: t, peer: -1, kind: Group,
		ops: int32(len(g.Colls) + len(g.P2P))}
	if int(g.Kind) < len(groupKinds) {
		e.kind = groupKinds[g.Kind]
	}
	for i := range g.P2P {
		p := &g.P2P[i]
		bit, far := uint64(1)<<(uint(p.Peer)&63), uint8(0)
		if p.Peer >= 64 {
			bit, far = 0, 1
		}
		if p.Kind == collectives.SendOp {
			e.bytes += int64(p.Bytes())
			e.sends++
			e.sendTo |= bit
			e.far |= far
		} else {
			e.recvs++
			e.recvFrom |= bit
			e.far |= far << 1
		}
	}
	for i := range g.Colls {
		e.bytes += int64(g.Colls[i].Count * g.Colls[i].Type.Size())
	}
	if len(g.Colls) > 1 {
		e.last = g.Colls[len(g.Colls)-1].Seq
	}
	switch {
	case len(g.P2P) > 0:
		p := &g.P2P[0]
		e.dtype, e.count, e.stream = int8(p.Type), int64(p.Count), p.Stream
		switch e.kind {
		case Group:
			if len(g.P2P) == 1 && len(g.Colls) == 0 {
				e.kind, e.peer = Send, int32(p.Peer)
				if p.Kind == collectives.RecvOp {
					e.kind, e.bytes = Recv, int64(p.Bytes())
				}
			}
		case Gather: // the Send to root comes first
			e.peer, e.bytes = int32(p.Peer), int64(p.Bytes())*r.nranks
		case Scatter: // the Recv from root comes last
			q := &g.P2P[len(g.P2P)-1]
			e.peer, e.bytes = int32(q.Peer), int64(q.Bytes())*r.nranks
		}
	case len(g.Colls) > 0:
		a := &g.Colls[0]
		e.dtype, e.count, e.stream = int8(a.Type), int64(a.Count), a.Stream
	}
	r.publishBegin(e, t)
	return r.n
}

// End records the outcome of call id. On an asynchronous backend a call
// that enqueued well stays Enqueued.
func (r *Ring) End(id uint64, err error) { r.EndPath(id, err, collectives.Path{}) }

// name returns the index of s in r.names, adding it; r.mu is held.
func (r *Ring) name(s string) uint8 {
	if s == "" {
		return 0
	}
	for i, n := range r.names {
		if n == s {
			return uint8(i + 1)
		}
	}
	if len(r.names) == maxNames {
		return 0
	}
	r.names = append(r.names, s) // once per name in the ring's life
	return uint8(len(r.names))
}

// EndPath is End with the path the backend took for the call.
func (r *Ring) EndPath(id uint64, err error, p collectives.Path) {
	if r == nil || id == 0 {
		return
	}
	if r.async {
		r.mu.Lock()
		if e := &r.ents[id%uint64(len(r.ents))]; e.id == id {
			r.setPath(p)
			e.algo, e.transport = r.lastCodes[0], r.lastCodes[1]
			if err != nil {
				e.fin, e.state = 0, Failed // when it gave up: unknown on devices
			}
		}
		r.mu.Unlock()
		return
	}
	t := r.clk.read()
	st := Finished
	if err != nil {
		st = Failed // when it gave up
	}
	if id != r.n {
		r.endEarlier(id, st, t, p)
		return
	}
	if p != r.last {
		r.mu.Lock()
		r.setPath(p)
		r.mu.Unlock()
	}
	r.ents[r.pos].entryEnd = entryEnd{fin: t, algo: r.lastCodes[0], transport: r.lastCodes[1], state: st}
	release.Uint64(&r.pub, id<<1|1)
}

// setPath makes p the last path; mu is held.
func (r *Ring) setPath(p collectives.Path) {
	if p != r.last {
		r.last, r.lastCodes = p, [2]uint8{r.name(string(p.Algo)), r.name(p.Transport)}
	}
}

// endEarlier ends a synchronous ring's call id older than its newest
// (not a path a communicator takes: its calls end before the next
// begins), under mu, where readers may look at it.
func (r *Ring) endEarlier(id uint64, st State, t int64, p collectives.Path) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := &r.ents[id%uint64(len(r.ents))]
	if e.id != id || id > r.n || e.state != Started {
		return
	}
	r.setPath(p)
	e.entryEnd = entryEnd{fin: t, algo: r.lastCodes[0], transport: r.lastCodes[1], state: st}
	if id <= r.counted && st == Finished { // count passed it while it ran
		r.stats.add(e.kind, e.bytes, ns(t-e.beg, r.clk.mul))
	}
}

// Complete gives call id its start and finish as the device saw them, in
// the ring's ticks (Ticks), for asynchronous backends: the GPU backend
// stores them in host-mapped memory at the call's Slot and hands them over
// once the device has written them.
func (r *Ring) Complete(id uint64, start, finish int64) {
	if r == nil || id == 0 {
		return
	}
	if !r.async {
		return // a host call's times are its own
	}
	r.mu.Lock()
	e := &r.ents[id%uint64(len(r.ents))]
	if e.id == id && e.state == Enqueued {
		e.beg, e.fin, e.state = start, finish, Finished
		r.stats.add(e.kind, e.bytes, ns(finish-start, r.clk.mul))
	}
	r.mu.Unlock()
}

// DeviceClock is implemented by asynchronous backends whose device
// records when each call ran (a kernel storing %globaltimer into
// host-mapped memory at the call's number modulo a table's size, with no
// extra synchronisation): CallTimes reports the start and finish of call
// seq in wall-clock nanoseconds, ok false while the device has not
// written them.
type DeviceClock interface {
	CallTimes(seq uint64) (start, finish int64, ok bool)
}

// Resolve completes the enqueued numbered calls whose GPU timestamps dc
// knows (a group's from its first call's start, or its last's where a
// fused launch timed them together, to its last's finish);
// readers call it before Snapshot and Stats. A call already completed
// from the device takes newer times when they appear (a graph replay).
func (r *Ring) Resolve(dc DeviceClock) {
	if r == nil || dc == nil || !r.async {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.ents {
		e := &r.ents[i]
		if e.seq == 0 || (e.state != Enqueued && e.runs == 0) {
			continue
		}
		s, f, ok := dc.CallTimes(e.seq)
		if e.last > e.seq {
			// A fused launch times its calls in its last call's slot.
			s2, f2, ok2 := dc.CallTimes(e.last)
			if !ok || s > f2 {
				s = s2
			}
			f, ok = f2, ok2
		}
		if !ok || f < s || (e.runs > 0 && s == e.dev) {
			continue
		}
		// Kept in the device's wall-clock nanoseconds (runs > 0 says so):
		// converting them to ticks and back would move them by the
		// clock's rate error over their distance from its base pair.
		e.beg, e.fin, e.state, e.dev = s, f, Finished, s
		e.runs++
		r.stats.add(e.kind, e.bytes, f-s)
	}
}

// Slot is where a device writes the timestamps of call number id: id
// modulo the ring's size (0 <= Slot < the ring's size).
func (r *Ring) Slot(id uint64) int {
	if r == nil {
		return -1
	}
	return int(id % r.size)
}

func nameAt(names []string, i uint8) string {
	if i == 0 || int(i) > len(names) {
		return ""
	}
	return names[i-1]
}

// deviceSlot is where a device writes call e's timestamps (its number
// modulo the ring's size, the size of the GPU backend's table); -1 where
// none does.
func (r *Ring) deviceSlot(e *entry) int {
	if !r.async || e.seq == 0 {
		return -1
	}
	return int(e.seq % r.size)
}

// Ticks reads the ring's clock.
func (r *Ring) Ticks() int64 { return r.clk.read() }

// Snapshot copies the ring, oldest call first, with times in wall-clock
// nanoseconds.
func (r *Ring) Snapshot() Record {
	if r == nil {
		return Record{Version: recordVersion}
	}
	return r.SnapshotLast(int(r.size))
}

// SnapshotLast is Snapshot of the last k calls at most.
func (r *Ring) SnapshotLast(k int) Record {
	if r == nil {
		return Record{Version: recordVersion}
	}
	r.mu.Lock()
	v := r.pub.Load()
	n, slots := v>>1, uint64(len(r.ents))
	first := uint64(1)
	if keep := min(r.size, uint64(max(k, 0))); n > keep {
		first = n - keep + 1
	}
	ents := make([]entry, 0, n-first+1)
	for id := first; id <= n; id++ {
		e := &r.ents[id%slots]
		if id == n && v&1 == 0 {
			// Under way: its End's fields are the writer's.
			ents = append(ents, entry{entryBegin: e.entryBegin, entryEnd: entryEnd{state: Started}})
			continue
		}
		ents = append(ents, *e)
	}
	names := r.names[:len(r.names):len(r.names)] // only appended to
	meta := r.meta
	r.mu.Unlock()
	w := r.clk.wall()
	rec := Record{Version: recordVersion, Meta: meta, Dropped: first - 1, Calls: make([]Call, len(ents))}
	for i := range ents {
		rec.Calls[i] = ents[i].export(w, r.deviceSlot(&ents[i]))
		rec.Calls[i].Algo, rec.Calls[i].Transport = nameAt(names, ents[i].algo), nameAt(names, ents[i].transport)
	}
	return rec
}

package comm

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// Flight records over the bootstrap. When a call of a rank fails for a
// peer that never came, when its communicator aborts, and when it closes,
// the rank sends its last calls to every rank, through rank 0 like every
// bootstrap frame, and each rank keeps the latest record of each peer.
// The frames travel beside the bootstrap's ops, read by the connections'
// readers: a rank busy elsewhere (in another call, in the application)
// still receives and relays them; a stopped or dead rank sends none, and
// the recorder directory's files remain the fallback.

// maxRecordFrame caps a record frame (a few kilobytes for the calls sent).
const maxRecordFrame = 1 << 20

// recordBox holds the latest record received from each rank, and which
// ranks are known gone (their process exited or went silent) so that no
// record of theirs can come any more.
type recordBox struct {
	mu   sync.Mutex
	recs [][]byte      // by rank; nil: none yet
	lost []bool        // by rank
	sig  chan struct{} // signalled (without blocking) on each arrival
}

func (x *recordBox) init(n int) {
	if x.recs == nil {
		x.recs, x.lost, x.sig = make([][]byte, n), make([]bool, n), make(chan struct{}, 1)
	}
}

// signal wakes the waiter, if any, without blocking.
func (x *recordBox) signal() {
	select {
	case x.sig <- struct{}{}:
	default:
	}
}

// shareRecord sends this rank's record (JSON) to every rank, best effort:
// a peer that cannot take it within a second goes without.
func (b *tcpBootstrap) shareRecord(rec []byte) {
	if len(rec)+4 > maxRecordFrame || b.closing.Load() {
		return
	}
	note := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(rec)), uint32(b.rank))
	note = append(note, rec...)
	for _, p := range b.peers {
		if p != nil && !p.bye.Load() {
			_ = p.write(kindRecord, 0, note, time.Second)
		}
	}
}

// gotRecord keeps a record frame from p; rank 0 relays it to the other
// leaves. A frame that names another rank than its sender's (at rank 0)
// or this rank is malformed.
func (b *tcpBootstrap) gotRecord(p *peer, payload []byte) error {
	if len(payload) < 4 || len(payload) > maxRecordFrame {
		return fmt.Errorf("%w: record frame of %d bytes", errMalformed, len(payload))
	}
	r := int(binary.BigEndian.Uint32(payload))
	if r >= b.nranks || r == b.rank || (b.rank == 0 && r != p.rank) {
		return fmt.Errorf("%w: record frame from rank %d names rank %d", errMalformed, p.rank, r)
	}
	// Relayed before it is kept: rank 0's own failed call, which waits
	// for this record, then closes the connections only after the other
	// leaves have it.
	if b.rank == 0 && !b.closing.Load() {
		for _, q := range b.peers {
			if q != nil && q.rank != r && !q.bye.Load() {
				_ = q.write(kindRecord, 0, payload, time.Second)
			}
		}
	}
	rec := append([]byte(nil), payload[4:]...)
	b.recs.mu.Lock()
	b.recs.init(b.nranks)
	b.recs.recs[r] = rec
	b.recs.mu.Unlock()
	b.recs.signal()
	return nil
}

// markLost records that rank r's process is gone: its connection closed
// or went silent (at rank 0), or rank 0 said so.
func (b *tcpBootstrap) markLost(r int) {
	if r < 0 || r >= b.nranks {
		return
	}
	b.recs.mu.Lock()
	b.recs.init(b.nranks)
	b.recs.lost[r] = true
	b.recs.mu.Unlock()
	b.recs.signal()
}

// recordMayCome reports whether a record of rank r can still reach this
// rank: the connection it would come over (r's own at rank 0, rank 0's
// elsewhere) is open, and r is not known to be gone.
func (b *tcpBootstrap) recordMayCome(r int) bool {
	via := 0
	if b.rank == 0 {
		via = r
	}
	if via >= len(b.peers) || b.peers[via] == nil {
		return false
	}
	select {
	case <-b.peers[via].gone:
		return false
	default:
	}
	b.recs.mu.Lock()
	defer b.recs.mu.Unlock()
	b.recs.init(b.nranks)
	return !b.recs.lost[r]
}

// peerRecords returns the latest record received from each rank (nil
// where none) and a channel signalled when another arrives.
func (b *tcpBootstrap) peerRecords() ([][]byte, <-chan struct{}) {
	b.recs.mu.Lock()
	defer b.recs.mu.Unlock()
	b.recs.init(b.nranks)
	return append([][]byte(nil), b.recs.recs...), b.recs.sig
}

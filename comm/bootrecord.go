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

// recordBox holds the latest record received from each rank.
type recordBox struct {
	mu   sync.Mutex
	recs [][]byte      // by rank; nil: none yet
	sig  chan struct{} // signalled (without blocking) on each arrival
}

func (x *recordBox) init(n int) {
	if x.recs == nil {
		x.recs, x.sig = make([][]byte, n), make(chan struct{}, 1)
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
	rec := append([]byte(nil), payload[4:]...)
	b.recs.mu.Lock()
	b.recs.init(b.nranks)
	b.recs.recs[r] = rec
	b.recs.mu.Unlock()
	select {
	case b.recs.sig <- struct{}{}:
	default:
	}
	if b.rank == 0 && !b.closing.Load() {
		for _, q := range b.peers {
			if q != nil && q.rank != r && !q.bye.Load() {
				_ = q.write(kindRecord, 0, payload, time.Second)
			}
		}
	}
	return nil
}

// peerRecords returns the latest record received from each rank (nil
// where none) and a channel signalled when another arrives.
func (b *tcpBootstrap) peerRecords() ([][]byte, <-chan struct{}) {
	b.recs.mu.Lock()
	defer b.recs.mu.Unlock()
	b.recs.init(b.nranks)
	return append([][]byte(nil), b.recs.recs...), b.recs.sig
}

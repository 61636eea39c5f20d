package release

import (
	"math"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStores(t *testing.T) {
	for _, v := range []uint64{0, 1, 0xdeadbeef, math.MaxUint32 + 7, math.MaxUint64} {
		var w struct {
			before uint64
			x      atomic.Uint64
			after  uint64
		}
		Uint64(&w.x, v)
		assert.Equal(t, v, w.x.Load())
		assert.Zero(t, w.before+w.after, "neighbours untouched")
		var h struct {
			before uint32
			x      atomic.Uint32
			after  uint32
		}
		Uint32(&h.x, uint32(v))
		assert.Equal(t, uint32(v), h.x.Load())
		assert.Zero(t, h.before+h.after, "neighbours untouched")
	}
}

// TestPublishes: a reader that sees a published number sees the plain
// writes the writer made before publishing it. The writer fills a slot,
// publishes the round's number and waits for the reader's
// acknowledgement before refilling the slot.
func TestPublishes(t *testing.T) {
	const rounds = 20000
	var slot [8]uint64
	var pub, ack atomic.Uint64
	bad := make(chan uint64, 1)
	go func() {
		for n := uint64(1); n <= rounds; n++ {
			for pub.Load() != n {
				runtime.Gosched()
			}
			for _, x := range slot {
				if x != n {
					select {
					case bad <- n:
					default:
					}
				}
			}
			ack.Store(n)
		}
	}()
	for n := uint64(1); n <= rounds; n++ {
		for i := range slot {
			slot[i] = n
		}
		Uint64(&pub, n)
		for ack.Load() != n {
			runtime.Gosched()
		}
	}
	select {
	case n := <-bad:
		t.Fatalf("round %d: the reader saw the number before the slot's writes", n)
	default:
	}
}

func BenchmarkUint64(b *testing.B) {
	var x atomic.Uint64
	for i := 0; b.Loop(); i++ {
		Uint64(&x, uint64(i))
	}
}

func BenchmarkAtomicStore(b *testing.B) {
	var x atomic.Uint64
	for i := 0; b.Loop(); i++ {
		x.Store(uint64(i))
	}
}

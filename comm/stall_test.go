package comm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A heartbeat gap longer than the limit is a stall of this rank, while it
// lasts and for one limit after it ended; a short gap is not. (Offsets of
// minutes: no dependence on this machine's speed.)
func TestStallDetection(t *testing.T) {
	b := &tcpBootstrap{stallLimit: time.Minute, epoch: time.Now().Add(-time.Hour)}
	b.lastTick.Store(b.now())
	_, ok := b.stalled()
	assert.False(t, ok, "a fresh tick")

	b.lastTick.Store(b.now() - int64(3*time.Minute))
	d, ok := b.stalled()
	assert.True(t, ok, "tick overdue: stalled now")
	assert.GreaterOrEqual(t, d, 3*time.Minute)

	b.tick() // the heartbeat runs again and records the gap
	d, ok = b.stalled()
	assert.True(t, ok, "the stall just ended")
	assert.GreaterOrEqual(t, d, 3*time.Minute)

	b.stallAt.Store(b.now() - int64(2*time.Minute))
	_, ok = b.stalled()
	assert.False(t, ok, "a stall that ended long ago")

	var idle tcpBootstrap // no heartbeat (one rank)
	_, ok = idle.stalled()
	assert.False(t, ok)
}

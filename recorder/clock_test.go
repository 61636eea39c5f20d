package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWallRefitsTheRate: past the calibration's span the conversion reads
// the rate again, so a miscalibrated counter (1000 ppm: 2 ms off after
// 2 s) still tells the wall time of a tick read now, within 200 us of the
// wall-clock reads around it (which a preemption may push apart).
func TestWallRefitsTheRate(t *testing.T) {
	c := clock{read: nanotime, mul: 1<<32 + 1<<32/1000,
		tick0: nanotime() - int64(2*time.Second), wall0: time.Now().Add(-2 * time.Second)}
	w := c.wall()
	before := time.Now().UnixNano()
	tick := c.read()
	after := time.Now().UnixNano()
	got := w.at(tick)
	slack := int64(200 * time.Microsecond)
	assert.GreaterOrEqual(t, got, before-slack, "%d ns before the read began", before-got)
	assert.LessOrEqual(t, got, after+slack, "%d ns after the read ended", got-after)
}

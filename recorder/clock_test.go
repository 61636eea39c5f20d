package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWallTicksRoundTrip: a wall-clock time converted to ticks and back
// through one conversion returns to within a nanosecond per second, however
// far the short calibration's rate is off (here by 30 ppm, a 2 ms
// calibration on a loaded machine) and whether the span since the base
// pair is short (the calibrated rate) or long (the refitted one).
func TestWallTicksRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  time.Duration
	}{
		{"short span", 10 * time.Millisecond},
		{"long span", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			c := clock{read: nanotime, mul: 1<<32 + 1<<32/33333,
				tick0: nanotime() - int64(tc.age), wall0: now.Add(-tc.age)}
			w := c.wall()
			for _, off := range []time.Duration{-2 * time.Second, -time.Second, 0, time.Millisecond, time.Hour} {
				at := now.Add(off).UnixNano()
				assert.InDelta(t, 0, w.at(w.ticks(at))-at, 2, "%v from now", off)
			}
		})
	}
}

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

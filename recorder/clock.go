package recorder

import (
	"math/bits"
	"os"
	"strings"
	"sync"
	"time"
	_ "unsafe" // runtime.nanotime
)

// The clock. Calls are timed in ticks: the CPU's time-stamp counter where
// the kernel trusts it as its own clock source (invariant and synchronised
// across CPUs), else the runtime's monotonic nanoseconds. A counter read
// costs a few nanoseconds where the monotonic clock's costs twenty or more
// in virtual machines, which matters twice per call.

//go:linkname nanotime runtime.nanotime
func nanotime() int64

// clock converts ticks to nanoseconds and to wall time.
type clock struct {
	read func() int64
	// mul is nanoseconds per tick in 32.32 fixed point, from a short
	// calibration; good for durations.
	mul uint64
	// The base pair: a tick count and the wall time it was read at.
	tick0 int64
	wall0 time.Time
}

var (
	clockOnce sync.Once
	theClock  clock
)

// calibration is how long the counter is measured against the monotonic
// clock: the rate's error is the monotonic clock's resolution over it.
const calibration = 2 * time.Millisecond

func getClock() *clock {
	clockOnce.Do(func() {
		theClock = newClock(tscTrusted())
	})
	return &theClock
}

// tscTrusted reports whether the counter can be used: an amd64 CPU whose
// kernel chose it as clock source.
func tscTrusted() bool {
	if !haveTSC {
		return false
	}
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

func newClock(tsc bool) clock {
	if !tsc {
		now := time.Now()
		return clock{read: nanotime, mul: 1 << 32, tick0: nanotime(), wall0: now}
	}
	c := clock{read: rdtsc}
	t0, w0 := c.pair()
	for time.Since(w0) < calibration {
	}
	t1, w1 := c.pair()
	c.mul = rate(w1.Sub(w0), t1-t0)
	c.tick0, c.wall0 = t0, w0
	return c
}

// pair reads the counter and the wall clock together: of a few tries the
// one whose two counter reads around the wall clock's lie closest, so that
// a preemption between the reads (a loaded machine) does not skew the rate
// by its length.
func (c *clock) pair() (int64, time.Time) {
	var (
		best  int64 = -1
		tick  int64
		wallT time.Time
	)
	for range 5 {
		a := c.read()
		w := time.Now()
		b := c.read()
		if span := b - a; best < 0 || span < best {
			best, tick, wallT = span, a+span/2, w
		}
	}
	return tick, wallT
}

// rate is d/ticks in 32.32 fixed point.
func rate(d time.Duration, ticks int64) uint64 {
	if ticks <= 0 {
		return 1 << 32
	}
	hi, lo := bits.Mul64(uint64(d), 1<<32)
	q, _ := bits.Div64(hi, lo, uint64(ticks))
	return q
}

// ns converts a tick span to nanoseconds at rate mul.
func ns(ticks int64, mul uint64) int64 {
	if ticks <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(ticks), mul)
	return int64(hi<<32 | lo>>32)
}

// wallConv converts ticks to wall-clock nanoseconds since the Unix epoch.
// It measures the rate again over the whole span since the base pair, so
// that ranks' times agree to microseconds after hours.
type wallConv struct {
	tick0 int64
	wall0 int64
	mul   uint64
}

func (c *clock) wall() wallConv {
	t1, w1 := c.pair()
	mul := c.mul
	if d := w1.Sub(c.wall0); d > 100*calibration {
		mul = rate(d, t1-c.tick0)
	}
	return wallConv{tick0: c.tick0, wall0: c.wall0.UnixNano(), mul: mul}
}

func (w wallConv) at(t int64) int64 {
	if t == 0 {
		return 0
	}
	d := t - w.tick0
	if d < 0 {
		return w.wall0 - ns(-d, w.mul)
	}
	return w.wall0 + ns(d, w.mul)
}

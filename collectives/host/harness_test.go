package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
	"github.com/goccl/goccl/internal/onheap"
	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/transporttest"
)

// job is n in-process ranks, each with its host backend.
type job struct {
	t   testing.TB
	n   int
	bes []collectives.Backend
	rng *rand.Rand
	// arenas[r], when set, is where rank r's buffers handed to Run come
	// from (memory from Alloc, direct_test.go); else the heap.
	arenas []*arena
}

// arena hands out 64-byte-aligned pieces of one buffer, from the start
// again at each reset.
type arena struct {
	mem  []byte
	used int
}

func (a *arena) take(n int) []byte {
	if a.used+n > len(a.mem) {
		panic(fmt.Sprintf("arena of %d bytes: %d used, %d more asked for", len(a.mem), a.used, n))
	}
	b := a.mem[a.used : a.used+n : a.used+n]
	a.used += (n + 63) &^ 63
	return b
}

func (j *job) resetArenas() {
	for _, a := range j.arenas {
		if a != nil {
			a.used = 0
		}
	}
}

// buf returns n bytes for rank r's buffers handed to Run.
func (j *job) buf(r, n int) []byte {
	if r < len(j.arenas) && j.arenas[r] != nil {
		return j.arenas[r].take(n)
	}
	return alloc(n)
}

// cloneFor copies b into a buffer of rank r's (buf).
func (j *job) cloneFor(r int, b []byte) []byte {
	c := j.buf(r, len(b))
	copy(c, b)
	return c
}

func newJob(t testing.TB, n int, cfg Config) *job {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // aborts are expected here
	}
	j := &job{t: t, n: n, bes: make([]collectives.Backend, n), rng: rand.New(rand.NewPCG(uint64(n), 42))}
	g := transporttest.NewGroup(n)
	require.NoError(t, g.Run(func(rank int, b transport.Bootstrap) error {
		be, err := New(context.Background(), b, cfg)
		j.bes[rank] = be
		return err
	}))
	t.Cleanup(j.close)
	return j
}

func (j *job) close() {
	for _, be := range j.bes {
		if be != nil {
			require.NoError(j.t, be.Close())
		}
	}
}

// each calls f for every rank concurrently and returns its errors by rank.
func (j *job) each(f func(r int) error) []error {
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	for r := range j.bes {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = f(r)
		}(r)
	}
	wg.Wait()
	return errs
}

// run calls every rank's Run concurrently with its own args.
func (j *job) run(ctx context.Context, args []collectives.Args) []error {
	return j.each(func(r int) error { return j.bes[r].Run(ctx, &args[r]) })
}

// alloc returns n zero bytes, 64-byte aligned, on the heap (the backend
// holds only their address while Run runs).
//
//go:noinline
func alloc(n int) []byte {
	w := make([]uint64, (n+127)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
	off := int((64 - uintptr(unsafe.Pointer(&b[0]))%64) % 64)
	return b[off : off+n : off+n]
}

// addr is b's address for a call, b kept on the heap.
func addr(b []byte) uintptr { return onheap.Addr(b) }

// poison fills an output with bytes no correct result is made of: NaN for
// floats, 0xAB for integers.
func poison(dt collectives.DataType, b []byte) {
	v := byte(0xAB)
	if dt.IsFloat() {
		v = 0xFF
	}
	for i := range b {
		b[i] = v
	}
}

// fill writes fresh random nonzero elements suited to op: floats of
// magnitude in [0.01, 1) (in [0.5, 2) for prod, so products stay in range)
// with random signs, integers over their whole range.
func fill(rng *rand.Rand, dt collectives.DataType, op collectives.Op, b []byte) {
	es := dt.Size()
	if !dt.IsFloat() {
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		for i := len(b) &^ 7; i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
		for i := 0; i < len(b); i += es {
			if allZero(b[i : i+es]) {
				b[i] = 1 + byte(rng.IntN(255))
			}
		}
		return
	}
	lo, span := 0.01, 0.99
	if op == collectives.Prod {
		lo, span = 0.5, 1.5
	}
	for i := 0; i < len(b)/es; i++ {
		u := rng.Uint64()
		v := lo + span*float64(u>>11)/(1<<53)
		if u&1 == 1 {
			v = -v
		}
		storeFloat(dt, b, i, v)
	}
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

func storeFloat(dt collectives.DataType, b []byte, i int, v float64) {
	le := binary.LittleEndian
	switch dt {
	case collectives.Float16:
		le.PutUint16(b[2*i:], half.Float32ToFloat16(float32(v)))
	case collectives.BFloat16:
		le.PutUint16(b[2*i:], half.Float32ToBFloat16(float32(v)))
	case collectives.Float32:
		le.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case collectives.Float64:
		le.PutUint64(b[8*i:], math.Float64bits(v))
	case collectives.Float8E4M3:
		b[i] = fp8.Float32ToE4M3(float32(v))
	case collectives.Float8E5M2:
		b[i] = fp8.Float32ToE5M2(float32(v))
	}
}

// raw reads element i's bits.
func raw(dt collectives.DataType, b []byte, i int) uint64 {
	le := binary.LittleEndian
	switch dt.Size() {
	case 1:
		return uint64(b[i])
	case 2:
		return uint64(le.Uint16(b[2*i:]))
	case 4:
		return uint64(le.Uint32(b[4*i:]))
	}
	return le.Uint64(b[8*i:])
}

// intVal is element i sign- or zero-extended to 64 bits.
func intVal(dt collectives.DataType, b []byte, i int) uint64 {
	u := raw(dt, b, i)
	switch dt {
	case collectives.Int8:
		return uint64(int64(int8(u)))
	case collectives.Int32:
		return uint64(int64(int32(u)))
	}
	return u
}

func floatVal(dt collectives.DataType, b []byte, i int) float64 {
	u := raw(dt, b, i)
	switch dt {
	case collectives.Float16:
		return float64(half.Float16ToFloat32(uint16(u)))
	case collectives.BFloat16:
		return float64(half.BFloat16ToFloat32(uint16(u)))
	case collectives.Float32:
		return float64(math.Float32frombits(uint32(u)))
	case collectives.Float8E4M3:
		return float64(fp8.E4M3ToFloat32(uint8(u)))
	case collectives.Float8E5M2:
		return float64(fp8.E5M2ToFloat32(uint8(u)))
	}
	return math.Float64frombits(u)
}

func signed(dt collectives.DataType) bool {
	return dt == collectives.Int8 || dt == collectives.Int32 || dt == collectives.Int64
}

// tolerance is the relative error allowed of a float result.
func tolerance(dt collectives.DataType) float64 {
	switch dt {
	case collectives.Float16:
		return 2e-3
	case collectives.BFloat16:
		return 1e-2
	case collectives.Float32:
		return 1e-5
	case collectives.Float8E4M3: // one rounding: half of 2^-3, relative
		return 1.0 / 16
	case collectives.Float8E5M2: // half of 2^-2
		return 1.0 / 8
	}
	return 1e-12
}

// subnormalHalfStep is the absolute error of rounding into a type's
// subnormal range (where the relative bound does not hold): half its
// smallest step. Only the 8-bit floats meet it here.
func subnormalHalfStep(dt collectives.DataType) float64 {
	switch dt {
	case collectives.Float8E4M3:
		return 1.0 / (1 << 10)
	case collectives.Float8E5M2:
		return 1.0 / (1 << 17)
	}
	return 0
}

// checkReduced compares element i of got with op over element i of each
// input (ins[q] at element offset base), computed here in 64-bit integer
// or float64 arithmetic.
func checkReduced(dt collectives.DataType, op collectives.Op, got []byte, gi int, ins [][]byte, ii int) error {
	n := len(ins)
	if !dt.IsFloat() {
		var acc uint64
		for q, in := range ins {
			v := intVal(dt, in, ii)
			switch {
			case q == 0:
				acc = v
			case op == collectives.Sum || op == collectives.Avg:
				acc += v
			case op == collectives.Prod:
				acc *= v
			case op == collectives.Min && signed(dt):
				acc = uint64(min(int64(acc), int64(v)))
			case op == collectives.Max && signed(dt):
				acc = uint64(max(int64(acc), int64(v)))
			case op == collectives.Min:
				acc = min(acc, v)
			case op == collectives.Max:
				acc = max(acc, v)
			}
		}
		if op == collectives.Avg {
			// 8- and 32-bit sums are exact in 64 bits; 64-bit ones wrap.
			if signed(dt) {
				acc = uint64(int64(acc) / int64(n))
			} else {
				acc /= uint64(n)
			}
		}
		mask := uint64(math.MaxUint64)
		if dt.Size() < 8 {
			mask = 1<<(8*dt.Size()) - 1
		}
		if g := raw(dt, got, gi); g&mask != acc&mask {
			return fmt.Errorf("element %d: got %#x, want %#x", gi, g&mask, acc&mask)
		}
		return nil
	}
	var ref, mag float64
	for q, in := range ins {
		v := floatVal(dt, in, ii)
		mag += math.Abs(v)
		switch {
		case q == 0:
			ref = v
		case op == collectives.Sum || op == collectives.Avg:
			ref += v
		case op == collectives.Prod:
			ref *= v
		case op == collectives.Min:
			ref = min(ref, v)
		case op == collectives.Max:
			ref = max(ref, v)
		}
	}
	bound := tolerance(dt) * mag
	switch op {
	case collectives.Avg:
		ref /= float64(n)
		bound /= float64(n)
	case collectives.Prod:
		bound = tolerance(dt) * math.Abs(ref)
	case collectives.Min, collectives.Max:
		bound = 0
	}
	if op != collectives.Min && op != collectives.Max {
		bound += subnormalHalfStep(dt)
	}
	if g := floatVal(dt, got, gi); !(math.Abs(g-ref) <= bound) {
		return fmt.Errorf("element %d: got %g, want %g (±%g)", gi, g, ref, bound)
	}
	return nil
}

// allocFailsEverywhere has rank r Alloc sizes[r] and asserts that every
// rank fails with ErrInvalidArgument, its text holding want (an Alloc that
// succeeds is closed and fails the assertion).
func allocFailsEverywhere(t *testing.T, j *job, sizes []uint64, want string) {
	t.Helper()
	errs := j.each(func(r int) error {
		p, reg, err := j.bes[r].(collectives.Registrar).Alloc(context.Background(), sizes[r])
		if err == nil {
			assert.NotZero(t, p)
			return reg.Close(context.Background())
		}
		return err
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		assert.Contains(t, err.Error(), want, "rank %d", r)
	}
}

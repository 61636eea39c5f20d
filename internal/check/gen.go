package check

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// kind is how a type's values are represented while computing references.
type kind uint8

const (
	kindSigned kind = iota
	kindUnsigned
	kindFloat
)

func kindOf(t collectives.DataType) kind {
	switch t {
	case collectives.Int8, collectives.Int32, collectives.Int64:
		return kindSigned
	case collectives.Uint8, collectives.Uint32, collectives.Uint64:
		return kindUnsigned
	}
	return kindFloat
}

// domain maps a 64-bit random word to a value of the type. Integers:
// lo + hi64(r*span)*mult (signed ones skip zero by shifting the
// non-negative half up by one). Floats: k*step for an integer k drawn the
// same way, with a random sign for prod.
type domain struct {
	kind     kind
	lo       int64
	span     uint64
	mult     uint64
	skipZero bool
	step     float64
	randSign bool
}

// gen yields the inputs of every rank of one case.
type gen struct {
	dom  domain
	base []uint64 // per rank
}

func newGen(c Case) *gen {
	g := &gen{dom: domainOf(c.Type, c.Op, c.Coll.Reduces(), c.NRanks), base: make([]uint64, c.NRanks)}
	for r := range g.base {
		g.base[r] = mix64(c.Seed ^ uint64(c.Type+1)<<56 ^ mix64(uint64(r)+0x632be59bd9b4e019))
	}
	return g
}

// mix64 is splitmix64's finalizer: a cheap bijective hash whose output
// passes as random for test data.
func mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// Seed hashes its parts into one case seed (a splitmix64 step per part),
// so that callers derive distinct, reproducible seeds from a base seed and
// a case's coordinates.
func Seed(parts ...uint64) uint64 {
	h := uint64(0x243f6a8885a308d3)
	for _, p := range parts {
		h = mix64(h + p + 0x9e3779b97f4a7c15)
	}
	return h
}

func (g *gen) word(rank, idx int) uint64 {
	return mix64(g.base[rank] + uint64(idx)*0x9e3779b97f4a7c15)
}

func (d *domain) signed(r uint64) int64 {
	hi, _ := bits.Mul64(r, d.span)
	v := d.lo + int64(hi)
	if d.skipZero && v >= 0 {
		v++
	}
	return v
}

func (d *domain) unsigned(r uint64) uint64 {
	hi, _ := bits.Mul64(r, d.span)
	return uint64(d.lo) + hi*d.mult
}

func (d *domain) float(r uint64) float64 {
	hi, _ := bits.Mul64(r, d.span)
	k := d.lo + int64(hi)
	if k == 0 {
		k = int64(d.span) / 4 // the value 1.0 for the symmetric grids
	}
	if d.randSign && r&1 == 1 {
		k = -k
	}
	return float64(k) * d.step
}

// typeMax is the largest value of an integer type.
func typeMax(t collectives.DataType) uint64 {
	switch t {
	case collectives.Int8:
		return math.MaxInt8
	case collectives.Uint8:
		return math.MaxUint8
	case collectives.Int32:
		return math.MaxInt32
	case collectives.Uint32:
		return math.MaxUint32
	case collectives.Int64:
		return math.MaxInt64
	}
	return math.MaxUint64
}

// floatStep is the grid of a float type's inputs: fine enough to exercise
// the mantissa, coarse enough that every value in [-2,2) is exact.
func floatStep(t collectives.DataType) float64 {
	switch t {
	case collectives.Float16:
		return 1.0 / 256
	case collectives.BFloat16:
		return 1.0 / 32
	case collectives.Float32:
		return 1.0 / (1 << 21)
	case collectives.Float8E4M3: // every multiple of 1/8 below 2 is exact
		return 1.0 / 8
	case collectives.Float8E5M2:
		return 1.0 / 4
	}
	return 1.0 / (1 << 50)
}

// rootN is the largest m >= 1 with m^n <= max.
func rootN(max uint64, n int) uint64 {
	if n <= 1 {
		return max
	}
	m := uint64(math.Pow(float64(max), 1/float64(n))) + 1
	for m > 1 && !powLE(m, n, max) {
		m--
	}
	return m
}

func powLE(m uint64, n int, max uint64) bool {
	p := uint64(1)
	for i := 0; i < n; i++ {
		hi, lo := bits.Mul64(p, m)
		if hi != 0 || lo > max {
			return false
		}
		p = lo
	}
	return true
}

// domainOf picks the input range. Signed integers never overflow (sum and
// avg: |v| <= max/n; prod: |v|^n <= max), since signed overflow is
// undefined in the kernels' C++. Unsigned sums stay in range too;
// unsigned products use odd values, which wrap (defined) but never reach
// zero. Floats lie in [-2,2), or +-[0.5,2) for prod so that products over
// a node's ranks stay normal numbers even in float16.
func domainOf(t collectives.DataType, op collectives.Op, reduces bool, n int) domain {
	if !reduces {
		op = collectives.Max // full range: copies must be bit-exact anyway
	}
	switch kindOf(t) {
	case kindSigned:
		m := typeMax(t)
		switch op {
		case collectives.Sum, collectives.Avg:
			m /= uint64(n)
		case collectives.PreMulSum:
			m /= uint64(n) * premulMax
		case collectives.Prod:
			m = rootN(m, n)
		}
		return domain{kind: kindSigned, lo: -int64(m), span: 2 * m, skipZero: true}
	case kindUnsigned:
		m := typeMax(t)
		switch op {
		case collectives.Sum, collectives.Avg:
			m /= uint64(n)
		case collectives.PreMulSum:
			m /= uint64(n) * premulMax
		case collectives.Prod:
			return domain{kind: kindUnsigned, lo: 1, span: m/2 + 1, mult: 2}
		}
		return domain{kind: kindUnsigned, lo: 1, span: m, mult: 1}
	}
	step := floatStep(t)
	k := int64(2 / step)
	if op == collectives.Prod {
		// magnitudes in [0.5, 2)
		return domain{kind: kindFloat, lo: k / 4, span: uint64(k - k/4), step: step, randSign: true}
	}
	return domain{kind: kindFloat, lo: -k, span: uint64(2 * k), step: step}
}

// FillInput writes rank's whole input of c into dst, which must hold
// exactly c.InputCount() elements.
func FillInput(c Case, rank int, dst []byte) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if rank < 0 || rank >= c.NRanks {
		return errBadRank(rank, c.NRanks)
	}
	if want := c.InputCount() * c.Type.Size(); len(dst) != want {
		return errBadLen("input", len(dst), want)
	}
	g := newGen(c)
	parallel(c.InputCount(), func(first, n int) {
		g.encode(c.Type, rank, first, dst[first*c.Type.Size():(first+n)*c.Type.Size()])
	})
	return nil
}

// encode writes elements [first, first+len) of rank's input into dst.
func (g *gen) encode(t collectives.DataType, rank, first int, dst []byte) {
	d := &g.dom
	n := len(dst) / t.Size()
	le := binary.LittleEndian
	switch t {
	case collectives.Int8:
		for i := 0; i < n; i++ {
			dst[i] = byte(d.signed(g.word(rank, first+i)))
		}
	case collectives.Uint8:
		for i := 0; i < n; i++ {
			dst[i] = byte(d.unsigned(g.word(rank, first+i)))
		}
	case collectives.Int32:
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], uint32(d.signed(g.word(rank, first+i))))
		}
	case collectives.Uint32:
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], uint32(d.unsigned(g.word(rank, first+i))))
		}
	case collectives.Int64:
		for i := 0; i < n; i++ {
			le.PutUint64(dst[8*i:], uint64(d.signed(g.word(rank, first+i))))
		}
	case collectives.Uint64:
		for i := 0; i < n; i++ {
			le.PutUint64(dst[8*i:], d.unsigned(g.word(rank, first+i)))
		}
	case collectives.Float16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], half.Float32ToFloat16(float32(d.float(g.word(rank, first+i)))))
		}
	case collectives.BFloat16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], half.Float32ToBFloat16(float32(d.float(g.word(rank, first+i)))))
		}
	case collectives.Float32:
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], math.Float32bits(float32(d.float(g.word(rank, first+i)))))
		}
	case collectives.Float64:
		for i := 0; i < n; i++ {
			le.PutUint64(dst[8*i:], math.Float64bits(d.float(g.word(rank, first+i))))
		}
	case collectives.Float8E4M3:
		for i := 0; i < n; i++ {
			dst[i] = fp8.Float32ToE4M3(float32(d.float(g.word(rank, first+i))))
		}
	case collectives.Float8E5M2:
		for i := 0; i < n; i++ {
			dst[i] = fp8.Float32ToE5M2(float32(d.float(g.word(rank, first+i))))
		}
	}
}

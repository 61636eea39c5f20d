package check

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// MaxMismatches is how many wrong elements a Result describes.
const MaxMismatches = 8

// Mismatch describes one wrong output element.
type Mismatch struct {
	Index     int    // element index in the rank's output buffer
	Got, Want string // values as the type prints them
	Tol       float64
}

// String gives "[index] got X want Y", with the tolerance when there is one.
func (m Mismatch) String() string {
	s := fmt.Sprintf("[%d] got %s want %s", m.Index, m.Got, m.Want)
	if m.Tol > 0 {
		s += fmt.Sprintf(" (tol %.3g)", m.Tol)
	}
	return s
}

// Result is the outcome of checking one rank's output.
type Result struct {
	Checked int        // elements compared
	Wrong   int        // elements outside tolerance (or not equal, where exact)
	First   []Mismatch // the lowest-indexed wrong elements, at most MaxMismatches
}

// OK reports whether every element was right.
func (r Result) OK() bool { return r.Wrong == 0 }

// String summarises the result and lists the first mismatches.
func (r Result) String() string {
	if r.OK() {
		return fmt.Sprintf("%d elements ok", r.Checked)
	}
	parts := make([]string, len(r.First))
	for i, m := range r.First {
		parts[i] = m.String()
	}
	return fmt.Sprintf("%d of %d elements wrong: %s", r.Wrong, r.Checked, strings.Join(parts, "; "))
}

// Verify compares rank's output of c (got, exactly c.OutputCount(rank)
// elements) with the reference computed from every contributor's
// regenerated input.
func Verify(c Case, rank int, got []byte) (Result, error) {
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	if rank < 0 || rank >= c.NRanks {
		return Result{}, errBadRank(rank, c.NRanks)
	}
	if want := c.OutputCount(rank) * c.Type.Size(); len(got) != want {
		return Result{}, errBadLen("output", len(got), want)
	}
	v := &verifier{c: c, g: newGen(c), tolK: tolFactor(c.Type, c.NRanks), eps: epsilon(c.Type), floor: floorTol(c.Type, c.NRanks) * float64(max(1, c.Roundings))}
	res := Result{Checked: c.OutputCount(rank)}
	var mu sync.Mutex
	for _, s := range c.segments(rank) {
		parallel(s.n, func(first, n int) {
			sc := scratchPool.Get().(*scratch)
			wrong, mm := v.chunk(sc, s, first, n, got)
			scratchPool.Put(sc)
			if wrong == 0 {
				return
			}
			mu.Lock()
			res.Wrong += wrong
			res.First = append(res.First, mm...)
			mu.Unlock()
		})
	}
	sort.Slice(res.First, func(i, j int) bool { return res.First[i].Index < res.First[j].Index })
	if len(res.First) > MaxMismatches {
		res.First = res.First[:MaxMismatches]
	}
	return res, nil
}

type scratch struct {
	f, mag, gf []float64
	s, gs      []int64
	u, gu      []uint64
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{
		f: make([]float64, chunk), mag: make([]float64, chunk), gf: make([]float64, chunk),
		s: make([]int64, chunk), gs: make([]int64, chunk),
		u: make([]uint64, chunk), gu: make([]uint64, chunk),
	}
}}

type verifier struct {
	c     Case
	g     *gen
	tolK  float64
	eps   float64
	floor float64 // absolute error allowed besides (subnormal roundings)
}

// chunk checks output elements [s.out+first, s.out+first+n).
func (v *verifier) chunk(sc *scratch, s segment, first, n int, got []byte) (int, []Mismatch) {
	t := v.c.Type
	size := t.Size()
	out := s.out + first
	raw := got[out*size : (out+n)*size]
	switch kindOf(t) {
	case kindSigned:
		ref, g := sc.s[:n], sc.gs[:n]
		v.refSigned(ref, s, first)
		decodeSigned(t, raw, g)
		return compareExact(ref, g, out, strconv.FormatInt)
	case kindUnsigned:
		ref, g := sc.u[:n], sc.gu[:n]
		v.refUnsigned(ref, s, first)
		decodeUnsigned(t, raw, g)
		return compareExact(ref, g, out, strconv.FormatUint)
	}
	ref, mag, g := sc.f[:n], sc.mag[:n], sc.gf[:n]
	v.refFloat(ref, mag, s, first)
	decodeFloat(t, raw, g)
	if !s.reduces || v.c.Op == collectives.Min || v.c.Op == collectives.Max {
		return compareExact(ref, g, out, formatFloat)
	}
	return v.compareTol(ref, mag, g, out)
}

func formatFloat(f float64, _ int) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func compareExact[T int64 | uint64 | float64](ref, got []T, out int, format func(T, int) string) (int, []Mismatch) {
	wrong := 0
	var mm []Mismatch
	for i := range ref {
		if ref[i] != got[i] { // NaN poison is never equal
			wrong++
			if len(mm) < MaxMismatches {
				mm = append(mm, Mismatch{Index: out + i, Got: format(got[i], 10), Want: format(ref[i], 10)})
			}
		}
	}
	return wrong, mm
}

func (v *verifier) compareTol(ref, mag, got []float64, out int) (int, []Mismatch) {
	wrong := 0
	var mm []Mismatch
	k, eps, n := v.tolK, v.eps, float64(v.c.NRanks)
	op := v.c.Op
	fp8 := v.c.Type.IsFloat8()
	for i := range ref {
		tol := v.floor
		if fp8 {
			tol += fp8Tol(op, eps/2, ref[i], mag[i], v.c.NRanks, v.c.Roundings)
		} else {
			tol += otherTol(op, k, eps, n, ref[i], mag[i])
		}
		// The negated form also rejects NaN.
		if !(math.Abs(got[i]-ref[i]) <= tol) {
			wrong++
			if len(mm) < MaxMismatches {
				mm = append(mm, Mismatch{Index: out + i, Got: formatFloat(got[i], 0), Want: formatFloat(ref[i], 0), Tol: tol})
			}
		}
	}
	return wrong, mm
}

// fp8Tol bounds an 8-bit float result: its inputs sum exactly in float32
// (multiples of 1/8 or 1/4 below 2, a node's ranks), so a sum or average
// carries only the final rounding, half an epsilon h of the result; a
// PreMulSum also rounds each product first (h of each, so h of their
// magnitudes' sum); a product carries float32's roundings too. Each
// further rounding of a partial result (roundings > 1) adds h of that
// partial, at most h of the magnitudes' sum (a product: h relative, compounded).
func fp8Tol(op collectives.Op, h, ref, mag float64, nranks, roundings int) float64 {
	const f32 = 1.0 / (1 << 24)
	extra := float64(max(roundings, 1) - 1)
	switch op {
	case collectives.Prod:
		return (math.Pow(1+h, extra+1) - 1 + float64(nranks)*f32) * math.Abs(ref)
	case collectives.PreMulSum:
		return h*math.Abs(ref) + h*(1+h)*mag + extra*h*(1+h)*mag
	}
	return h*(1+2*f32)*math.Abs(ref) + extra*h*(1+h)*mag
}

// otherTol is the other float types' bound (see Tolerance).
func otherTol(op collectives.Op, k, eps, n, ref, mag float64) float64 {
	switch op {
	case collectives.Prod:
		return k * math.Abs(ref)
	case collectives.Avg:
		return k*mag/n + eps*math.Abs(ref)
	}
	return k * mag // sum, and PreMulSum's sum of products
}

// refFloat computes the float64 reference (and the sum of magnitudes) of
// segment elements [first, first+len(ref)).
func (v *verifier) refFloat(ref, mag []float64, s segment, first int) {
	d, g := &v.g.dom, v.g
	src := s.src + first
	r0 := s.ranks[0]
	scale := func(int) float64 { return 1 }
	if s.reduces && v.premul() {
		scale = func(r int) float64 { return PremulScalar(v.c, r) }
	}
	s0 := scale(r0)
	for i := range ref {
		x := d.float(g.word(r0, src+i)) * s0
		ref[i], mag[i] = x, math.Abs(x)
	}
	if !s.reduces {
		return
	}
	for _, r := range s.ranks[1:] {
		switch v.c.Op {
		case collectives.PreMulSum:
			sr := scale(r)
			for i := range ref {
				x := d.float(g.word(r, src+i)) * sr
				ref[i] += x
				mag[i] += math.Abs(x)
			}
		case collectives.Sum, collectives.Avg:
			for i := range ref {
				x := d.float(g.word(r, src+i))
				ref[i] += x
				mag[i] += math.Abs(x)
			}
		case collectives.Prod:
			for i := range ref {
				ref[i] *= d.float(g.word(r, src+i))
			}
		case collectives.Min:
			for i := range ref {
				ref[i] = math.Min(ref[i], d.float(g.word(r, src+i)))
			}
		case collectives.Max:
			for i := range ref {
				ref[i] = math.Max(ref[i], d.float(g.word(r, src+i)))
			}
		}
	}
	if v.c.Op == collectives.Avg {
		n := float64(len(s.ranks))
		for i := range ref {
			ref[i] /= n
		}
	}
}

// foldInts loads rank s.ranks[0]'s words into ref and, for a reducing
// segment, folds the other ranks' in rank order with op (avg sums; the
// caller divides). Integer arithmetic wraps mod 2^64; callers truncate to
// the type's width.
func foldInts[T int64 | uint64](ref []T, s segment, first int, op collectives.Op, word func(rank, idx int) T) {
	src := s.src + first
	for i := range ref {
		ref[i] = word(s.ranks[0], src+i)
	}
	if !s.reduces {
		return
	}
	for _, r := range s.ranks[1:] {
		for i := range ref {
			x := word(r, src+i)
			switch op {
			case collectives.Sum, collectives.Avg, collectives.PreMulSum:
				ref[i] += x
			case collectives.Prod:
				ref[i] *= x
			case collectives.Min:
				ref[i] = min(ref[i], x)
			case collectives.Max:
				ref[i] = max(ref[i], x)
			}
		}
	}
}

// refSigned computes the exact reference with the type's wraparound.
func (v *verifier) refSigned(ref []int64, s segment, first int) {
	d, g := &v.g.dom, v.g
	foldInts(ref, s, first, v.c.Op, func(r, i int) int64 {
		x := d.signed(g.word(r, i))
		if s.reduces && v.premul() {
			x *= int64(PremulScalar(v.c, r))
		}
		return x
	})
	// Arithmetic mod 2^64 truncated to the width is the type's own
	// wraparound; avg divides the wrapped sum, truncating toward zero.
	switch v.c.Type {
	case collectives.Int8:
		for i := range ref {
			ref[i] = int64(int8(ref[i]))
		}
	case collectives.Int32:
		for i := range ref {
			ref[i] = int64(int32(ref[i]))
		}
	}
	if s.reduces && v.c.Op == collectives.Avg {
		n := int64(len(s.ranks))
		for i := range ref {
			ref[i] /= n
		}
	}
}

func (v *verifier) refUnsigned(ref []uint64, s segment, first int) {
	d, g := &v.g.dom, v.g
	foldInts(ref, s, first, v.c.Op, func(r, i int) uint64 {
		x := d.unsigned(g.word(r, i))
		if s.reduces && v.premul() {
			x *= uint64(PremulScalar(v.c, r))
		}
		return x
	})
	var mask uint64 = math.MaxUint64
	switch v.c.Type {
	case collectives.Uint8:
		mask = math.MaxUint8
	case collectives.Uint32:
		mask = math.MaxUint32
	}
	for i := range ref {
		ref[i] &= mask
	}
	if s.reduces && v.c.Op == collectives.Avg {
		n := uint64(len(s.ranks))
		for i := range ref {
			ref[i] /= n
		}
	}
}

func decodeSigned(t collectives.DataType, raw []byte, dst []int64) {
	le := binary.LittleEndian
	switch t {
	case collectives.Int8:
		for i := range dst {
			dst[i] = int64(int8(raw[i]))
		}
	case collectives.Int32:
		for i := range dst {
			dst[i] = int64(int32(le.Uint32(raw[4*i:])))
		}
	default:
		for i := range dst {
			dst[i] = int64(le.Uint64(raw[8*i:]))
		}
	}
}

func decodeUnsigned(t collectives.DataType, raw []byte, dst []uint64) {
	le := binary.LittleEndian
	switch t {
	case collectives.Uint8:
		for i := range dst {
			dst[i] = uint64(raw[i])
		}
	case collectives.Uint32:
		for i := range dst {
			dst[i] = uint64(le.Uint32(raw[4*i:]))
		}
	default:
		for i := range dst {
			dst[i] = le.Uint64(raw[8*i:])
		}
	}
}

func decodeFloat(t collectives.DataType, raw []byte, dst []float64) {
	le := binary.LittleEndian
	switch t {
	case collectives.Float16:
		for i := range dst {
			dst[i] = float64(half.Float16ToFloat32(le.Uint16(raw[2*i:])))
		}
	case collectives.BFloat16:
		for i := range dst {
			dst[i] = float64(half.BFloat16ToFloat32(le.Uint16(raw[2*i:])))
		}
	case collectives.Float32:
		for i := range dst {
			dst[i] = float64(math.Float32frombits(le.Uint32(raw[4*i:])))
		}
	case collectives.Float8E4M3:
		for i := range dst {
			dst[i] = float64(fp8.E4M3ToFloat32(raw[i]))
		}
	case collectives.Float8E5M2:
		for i := range dst {
			dst[i] = float64(fp8.E5M2ToFloat32(raw[i]))
		}
	default:
		for i := range dst {
			dst[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
	}
}

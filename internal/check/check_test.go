package check

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/collectives"
	"github.com/goccl/goccl/internal/fp8"
	"github.com/goccl/goccl/internal/half"
)

// The tests check Verify against an independent reference: the reduction
// done in each type's own Go arithmetic (wrapping integers, float32
// accumulation for the half types), not in check's float64/int64 path.

type native interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

func asSlice[T native](b []byte) []T {
	var z T
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

func reduceNative[T native](op collectives.Op, vals []T) T {
	acc := vals[0]
	for _, v := range vals[1:] {
		switch op {
		case collectives.Sum, collectives.Avg:
			acc += v
		case collectives.Prod:
			acc *= v
		case collectives.Min:
			acc = min(acc, v)
		case collectives.Max:
			acc = max(acc, v)
		}
	}
	if op == collectives.Avg {
		acc /= T(len(vals))
	}
	return acc
}

// expectNative computes rank's expected output bytes of c from the inputs.
func expectNative(t *testing.T, c Case, rank int, inputs [][]byte) []byte {
	out := make([]byte, c.OutputCount(rank)*c.Type.Size())
	switch c.Type {
	case collectives.Int8:
		expectTyped[int8](c, rank, inputs, out)
	case collectives.Uint8:
		expectTyped[uint8](c, rank, inputs, out)
	case collectives.Int32:
		expectTyped[int32](c, rank, inputs, out)
	case collectives.Uint32:
		expectTyped[uint32](c, rank, inputs, out)
	case collectives.Int64:
		expectTyped[int64](c, rank, inputs, out)
	case collectives.Uint64:
		expectTyped[uint64](c, rank, inputs, out)
	case collectives.Float32:
		expectTyped[float32](c, rank, inputs, out)
	case collectives.Float64:
		expectTyped[float64](c, rank, inputs, out)
	case collectives.Float16, collectives.BFloat16:
		// Widen to float32, reduce there, round back: what the kernels do.
		toF := half.Float16ToFloat32
		fromF := half.Float32ToFloat16
		if c.Type == collectives.BFloat16 {
			toF, fromF = half.BFloat16ToFloat32, half.Float32ToBFloat16
		}
		wide := make([][]byte, len(inputs))
		for r, in := range inputs {
			wide[r] = make([]byte, len(in)*2)
			w := asSlice[float32](wide[r])
			for i := range w {
				w[i] = toF(binary.LittleEndian.Uint16(in[2*i:]))
			}
		}
		wout := make([]byte, len(out)*2)
		expectTyped[float32](c, rank, wide, wout)
		for i, f := range asSlice[float32](wout) {
			binary.LittleEndian.PutUint16(out[2*i:], fromF(f))
		}
	case collectives.Float8E4M3, collectives.Float8E5M2:
		toF, fromF := fp8.E4M3ToFloat32, fp8.Float32ToE4M3
		if c.Type == collectives.Float8E5M2 {
			toF, fromF = fp8.E5M2ToFloat32, fp8.Float32ToE5M2
		}
		wide := make([][]byte, len(inputs))
		for r, in := range inputs {
			wide[r] = make([]byte, len(in)*4)
			w := asSlice[float32](wide[r])
			for i := range w {
				w[i] = toF(in[i])
			}
		}
		wout := make([]byte, len(out)*4)
		expectTyped[float32](c, rank, wide, wout)
		for i, f := range asSlice[float32](wout) {
			out[i] = fromF(f)
		}
	default:
		t.Fatalf("type %v", c.Type)
	}
	return out
}

func expectTyped[T native](c Case, rank int, inputs [][]byte, outb []byte) {
	in := make([][]T, len(inputs))
	for r := range inputs {
		in[r] = asSlice[T](inputs[r])
	}
	out := asSlice[T](outb)
	vals := make([]T, c.NRanks)
	reduceAt := func(src int) T {
		for r := range vals {
			vals[r] = in[r][src]
		}
		return reduceNative(c.Op, vals)
	}
	switch c.Coll {
	case collectives.AllReduce, collectives.Reduce:
		for i := range out {
			out[i] = reduceAt(i)
		}
	case collectives.ReduceScatter:
		for i := range out {
			out[i] = reduceAt(rank*c.Count + i)
		}
	case collectives.Broadcast:
		copy(out, in[c.Root])
	case collectives.AllGather:
		for r := 0; r < c.NRanks; r++ {
			copy(out[r*c.Count:], in[r])
		}
	}
}

func inputs(t *testing.T, c Case) [][]byte {
	in := make([][]byte, c.NRanks)
	for r := range in {
		in[r] = make([]byte, c.InputCount()*c.Type.Size())
		require.NoError(t, FillInput(c, r, in[r]))
	}
	return in
}

// everyCase lists collective x dtype x op (x root) for nranks.
func everyCase(nranks, count int) []Case {
	var cs []Case
	for _, coll := range collectives.AllCollectives() {
		for _, dt := range collectives.AllDataTypes() {
			ops := collectives.AllOps()
			if !coll.Reduces() {
				ops = []collectives.Op{collectives.Sum}
			}
			for _, op := range ops {
				root := 0
				if coll.Rooted() {
					root = nranks - 1
				}
				cs = append(cs, Case{Coll: coll, Type: dt, Op: op, Root: root, NRanks: nranks, Count: count, Seed: uint64(nranks*1000 + count)})
			}
		}
	}
	return cs
}

func TestVerifyAgainstNativeArithmetic(t *testing.T) {
	for _, nranks := range []int{1, 2, 3, 8} {
		for _, count := range []int{0, 1, 7, 300} {
			for _, c := range everyCase(nranks, count) {
				in := inputs(t, c)
				for rank := 0; rank < nranks; rank++ {
					want := expectNative(t, c, rank, in)
					res, err := Verify(c, rank, want)
					require.NoError(t, err)
					require.Truef(t, res.OK(), "%v rank %d: %v", c, rank, res)
					require.Equal(t, c.OutputCount(rank), res.Checked)
					if len(want) == 0 {
						continue
					}
					// Corrupt one element by flipping a high bit: caught,
					// and named.
					k := (len(want)/c.Type.Size() - 1) / 2
					bad := append([]byte(nil), want...)
					bad[(k+1)*c.Type.Size()-1] ^= 0x40
					res, err = Verify(c, rank, bad)
					require.NoError(t, err)
					require.Equalf(t, 1, res.Wrong, "%v rank %d", c, rank)
					require.Len(t, res.First, 1)
					assert.Equal(t, k, res.First[0].Index)
				}
			}
		}
	}
}

func TestVerifyDetectsPoison(t *testing.T) {
	for _, c := range everyCase(3, 500) {
		for rank := 0; rank < c.NRanks; rank++ {
			got := make([]byte, c.OutputCount(rank)*c.Type.Size())
			Poison(got, 0xFF)
			res, err := Verify(c, rank, got)
			require.NoError(t, err)
			if len(got) == 0 {
				continue
			}
			if c.Type.IsFloat() {
				assert.Equalf(t, len(got)/c.Type.Size(), res.Wrong, "%v: NaN poison must fail every element", c)
			} else {
				// -1 may be a right answer for a few signed elements.
				assert.Greaterf(t, res.Wrong, len(got)/c.Type.Size()/2, "%v", c)
			}
			assert.LessOrEqual(t, len(res.First), MaxMismatches)
		}
	}
}

// Hand-computed: the same inputs give the results worked out here.
func TestHandComputed(t *testing.T) {
	le := binary.LittleEndian
	val := func(c Case, rank, i int) float64 {
		in := make([]byte, c.InputCount()*c.Type.Size())
		require.NoError(t, FillInput(c, rank, in))
		b := in[i*c.Type.Size():]
		switch c.Type {
		case collectives.Int8:
			return float64(int8(b[0]))
		case collectives.Uint8:
			return float64(b[0])
		case collectives.Float32:
			return float64(math.Float32frombits(le.Uint32(b)))
		}
		t.Fatal("type")
		return 0
	}
	t.Run("int8 avg truncates toward zero", func(t *testing.T) {
		c := Case{Coll: collectives.AllReduce, Type: collectives.Int8, Op: collectives.Avg, NRanks: 3, Count: 64, Seed: 7}
		got := make([]byte, 64)
		for i := range got {
			s := int(val(c, 0, i) + val(c, 1, i) + val(c, 2, i))
			got[i] = byte(int8(s / 3)) // Go's / truncates, as C's does
		}
		res, err := Verify(c, 1, got)
		require.NoError(t, err)
		require.True(t, res.OK(), "%v", res)
	})
	t.Run("uint8 prod wraps", func(t *testing.T) {
		c := Case{Coll: collectives.AllReduce, Type: collectives.Uint8, Op: collectives.Prod, NRanks: 4, Count: 64, Seed: 9}
		got := make([]byte, 64)
		wrapped := 0
		for i := range got {
			p := 1
			for r := 0; r < 4; r++ {
				x := int(val(c, r, i))
				require.Equal(t, 1, x%2, "unsigned prod inputs are odd")
				p *= x
			}
			if p > 255 {
				wrapped++
			}
			got[i] = byte(p % 256)
		}
		require.Positive(t, wrapped, "some products must wrap")
		res, err := Verify(c, 0, got)
		require.NoError(t, err)
		require.True(t, res.OK(), "%v", res)
	})
	t.Run("float32 sum within tolerance, beyond it wrong", func(t *testing.T) {
		c := Case{Coll: collectives.ReduceScatter, Type: collectives.Float32, Op: collectives.Sum, NRanks: 2, Count: 16, Seed: 3}
		rank := 1
		got := make([]byte, 16*4)
		tol := Tolerance(collectives.Float32, 2)
		for i := 0; i < 16; i++ {
			a, b := val(c, 0, 16*rank+i), val(c, 1, 16*rank+i)
			off := 0.5 * tol * (math.Abs(a) + math.Abs(b))
			if i == 5 {
				off = 3 * tol * (math.Abs(a) + math.Abs(b))
			}
			le.PutUint32(got[4*i:], math.Float32bits(float32(a+b+off)))
		}
		res, err := Verify(c, rank, got)
		require.NoError(t, err)
		require.Equal(t, 1, res.Wrong, "%v", res)
		assert.Equal(t, 5, res.First[0].Index)
		assert.Positive(t, res.First[0].Tol)
	})
	t.Run("allgather slots", func(t *testing.T) {
		c := Case{Coll: collectives.AllGather, Type: collectives.Float32, NRanks: 3, Count: 2, Seed: 11}
		got := make([]byte, 6*4)
		for r := 0; r < 3; r++ {
			for i := 0; i < 2; i++ {
				le.PutUint32(got[4*(2*r+i):], math.Float32bits(float32(val(c, r, i))))
			}
		}
		res, err := Verify(c, 2, got)
		require.NoError(t, err)
		require.True(t, res.OK())
		// Swapping two ranks' slots is wrong in both.
		copy(got[0:8], got[8:16])
		res, err = Verify(c, 2, got)
		require.NoError(t, err)
		require.Equal(t, 2, res.Wrong)
		assert.Equal(t, []int{0, 1}, []int{res.First[0].Index, res.First[1].Index})
	})
}

func TestInputDomains(t *testing.T) {
	for _, n := range []int{1, 2, 3, 8} {
		for _, dt := range collectives.AllDataTypes() {
			for _, op := range append(collectives.AllOps(), collectives.PreMulSum) {
				c := Case{Coll: collectives.AllReduce, Type: dt, Op: op, NRanks: n, Count: 4096, Seed: 42}
				name := fmt.Sprintf("%v/%v/%d", dt, op, n)
				in := inputs(t, c)
				zero := make([]byte, dt.Size())
				distinct := map[string]bool{}
				for r := range in {
					for i := 0; i < c.Count; i++ {
						e := in[r][i*dt.Size() : (i+1)*dt.Size()]
						if bytes.Equal(zero, e) {
							t.Fatalf("%s: zero input at rank %d elt %d", name, r, i)
						}
						if dt.IsFloat() {
							var f float64
							switch dt {
							case collectives.Float16:
								f = float64(half.Float16ToFloat32(binary.LittleEndian.Uint16(e)))
							case collectives.BFloat16:
								f = float64(half.BFloat16ToFloat32(binary.LittleEndian.Uint16(e)))
							case collectives.Float32:
								f = float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
							case collectives.Float8E4M3:
								f = float64(fp8.E4M3ToFloat32(e[0]))
							case collectives.Float8E5M2:
								f = float64(fp8.E5M2ToFloat32(e[0]))
							default:
								f = math.Float64frombits(binary.LittleEndian.Uint64(e))
							}
							if f < -2 || f >= 2 || (op == collectives.Prod && math.Abs(f) < 0.5) {
								t.Fatalf("%s: %v outside the domain", name, f)
							}
						}
						distinct[string(e)] = true
					}
				}
				assert.Greaterf(t, len(distinct), 1, "%s: inputs must vary", name)
				// Ranks differ from one another.
				if n > 1 {
					assert.NotEqualf(t, in[0], in[1], "%s", name)
				}
			}
		}
	}
	// Deterministic per seed; different seeds differ.
	c := Case{Coll: collectives.AllReduce, Type: collectives.Float32, Op: collectives.Sum, NRanks: 2, Count: 100, Seed: 1}
	a, b := inputs(t, c), inputs(t, c)
	assert.Equal(t, a, b)
	c.Seed = 2
	assert.NotEqual(t, a, inputs(t, c))
}

func TestBadArguments(t *testing.T) {
	good := Case{Coll: collectives.Reduce, Type: collectives.Int32, Op: collectives.Sum, NRanks: 2, Count: 4}
	tests := []struct {
		name string
		mod  func(*Case)
		want string
	}{
		{"collective", func(c *Case) { c.Coll = 99 }, "collective"},
		{"type", func(c *Case) { c.Type = 42 }, "datatype"},
		{"op", func(c *Case) { c.Op = 9 }, "op"},
		{"nranks", func(c *Case) { c.NRanks = 0 }, "nranks"},
		{"count", func(c *Case) { c.Count = -1 }, "count"},
		{"root", func(c *Case) { c.Root = 2 }, "root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			_, err := Verify(c, 0, nil)
			require.ErrorIs(t, err, ErrBadCase)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := Verify(good, 0, make([]byte, 3))
	require.ErrorIs(t, err, ErrBadCase)
	assert.Contains(t, err.Error(), "want 16")
	_, err = Verify(good, 5, nil)
	require.ErrorIs(t, err, ErrBadCase)
	require.ErrorIs(t, FillInput(good, 0, make([]byte, 15)), ErrBadCase)
	// The non-root of Reduce has no output.
	res, err := Verify(good, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, 0, res.Checked)
}

func TestPoisonHelpers(t *testing.T) {
	b := make([]byte, 10)
	Poison(b, PoisonByte(0))
	assert.Equal(t, 0, Changed(b, 0xFF))
	b[3] = 0
	assert.Equal(t, 1, Changed(b, 0xFF))
	assert.NotEqual(t, PoisonByte(0), PoisonByte(1))
}

func TestToleranceScales(t *testing.T) {
	assert.Equal(t, 0.0, Tolerance(collectives.Int32, 8))
	assert.InDelta(t, 1e-5, Tolerance(collectives.Float32, 2), 1e-12)
	assert.InDelta(t, 1e-2, Tolerance(collectives.Float16, 2), 1e-9)
	assert.Greater(t, Tolerance(collectives.BFloat16, 8), Tolerance(collectives.BFloat16, 2))
}

func BenchmarkVerifyAllReduceFloat32(b *testing.B) {
	c := Case{Coll: collectives.AllReduce, Type: collectives.Float32, Op: collectives.Sum, NRanks: 2, Count: 1 << 24, Seed: 5}
	got := make([]byte, c.Count*4)
	b.SetBytes(int64(len(got)))
	for b.Loop() {
		_, _ = Verify(c, 0, got)
	}
}

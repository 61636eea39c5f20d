package collectives

import (
	"fmt"
	"strings"
)

// DataType is an element type. Values match NCCL's ncclDataType_t where
// NCCL has one, so that a C shim can pass them through.
type DataType int32

const (
	Int8         DataType = 0  // signed 8-bit integer
	Uint8        DataType = 1  // unsigned 8-bit integer
	Int32        DataType = 2  // signed 32-bit integer
	Uint32       DataType = 3  // unsigned 32-bit integer
	Int64        DataType = 4  // signed 64-bit integer
	Uint64       DataType = 5  // unsigned 64-bit integer
	Float16      DataType = 6  // IEEE 754 half precision
	Float32      DataType = 7  // IEEE 754 single precision
	Float64      DataType = 8  // IEEE 754 double precision
	BFloat16     DataType = 9  // bfloat16: float32's exponent, 7-bit mantissa
	Float8E4M3   DataType = 10 // 8-bit float, 4-bit exponent, 3-bit mantissa, no infinity (OCP E4M3)
	Float8E5M2   DataType = 11 // 8-bit float, 5-bit exponent, 2-bit mantissa (OCP E5M2)
	numDataTypes          = 12
)

// NumDataTypes sizes arrays indexed by DataType.
const NumDataTypes = numDataTypes

var dataTypeNames = [numDataTypes]string{
	Int8: "int8", Uint8: "uint8", Int32: "int32", Uint32: "uint32",
	Int64: "int64", Uint64: "uint64", Float16: "half", Float32: "float",
	Float64: "double", BFloat16: "bfloat16", Float8E4M3: "f8e4m3", Float8E5M2: "f8e5m2",
}

var dataTypeSizes = [numDataTypes]int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}

// AllDataTypes lists every supported type in enum order.
func AllDataTypes() []DataType {
	out := make([]DataType, numDataTypes)
	for i := range out {
		out[i] = DataType(i)
	}
	return out
}

// Valid reports whether t is a supported type.
func (t DataType) Valid() bool { return t >= 0 && t < numDataTypes }

// Size is the element size in bytes; 0 for an invalid type.
func (t DataType) Size() int {
	if !t.Valid() {
		return 0
	}
	return dataTypeSizes[t]
}

// IsFloat reports whether t is a floating-point type.
func (t DataType) IsFloat() bool {
	return t == Float16 || t == Float32 || t == Float64 || t == BFloat16 || t.IsFloat8()
}

// IsFloat8 reports whether t is one of the 8-bit float types, which are
// reduced in float32 and rounded once, saturating to their largest finite
// value as the GPU's conversions do.
func (t DataType) IsFloat8() bool { return t == Float8E4M3 || t == Float8E5M2 }

// String gives nccl-tests' spelling ("float", "half", "bfloat16", ...).
func (t DataType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("DataType(%d)", int32(t))
	}
	return dataTypeNames[t]
}

// ParseDataType accepts nccl-tests' names and the Go-style aliases
// (float32, float16, bf16, f64, ...).
func ParseDataType(s string) (DataType, error) {
	switch strings.ToLower(s) {
	case "int8", "i8", "char":
		return Int8, nil
	case "uint8", "u8":
		return Uint8, nil
	case "int32", "i32", "int":
		return Int32, nil
	case "uint32", "u32":
		return Uint32, nil
	case "int64", "i64":
		return Int64, nil
	case "uint64", "u64":
		return Uint64, nil
	case "half", "float16", "f16", "fp16":
		return Float16, nil
	case "float", "float32", "f32", "fp32":
		return Float32, nil
	case "double", "float64", "f64", "fp64":
		return Float64, nil
	case "bfloat16", "bf16":
		return BFloat16, nil
	case "f8e4m3", "float8e4m3", "fp8e4m3", "e4m3":
		return Float8E4M3, nil
	case "f8e5m2", "float8e5m2", "fp8e5m2", "e5m2":
		return Float8E5M2, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownDataType, s)
}

// Op is a reduction operator. Values match NCCL's ncclRedOp_t.
type Op int32

const (
	Sum  Op = 0 // element-wise sum
	Prod Op = 1 // element-wise product
	Max  Op = 2 // element-wise maximum
	Min  Op = 3 // element-wise minimum
	Avg  Op = 4 // sum divided by the number of ranks
	// PreMulSum multiplies every input by Args.Scalar, then sums (NCCL's
	// ncclRedOpCreatePreMulSum). The communicator's Go and C APIs hand out
	// op handles that carry the scalar (comm.Comm.CreatePreMulSum); the
	// backends see this value with the scalar in Args.
	PreMulSum Op = 5
)

const numOps = 6

// NumOps sizes arrays indexed by Op.
const NumOps = numOps

var opNames = [numOps]string{"sum", "prod", "max", "min", "avg", "mulsum"}

// AllOps lists the operators that need no scalar, in enum order (every
// one but PreMulSum).
func AllOps() []Op { return []Op{Sum, Prod, Max, Min, Avg} }

// Valid reports whether o is a supported operator.
func (o Op) Valid() bool { return o >= 0 && o < numOps }

// String gives nccl-tests' spelling ("sum", "prod", ..., "mulsum").
func (o Op) String() string {
	if !o.Valid() {
		return fmt.Sprintf("Op(%d)", int32(o))
	}
	return opNames[o]
}

// ParseOp accepts "sum", "prod", "max", "min", "avg" and "mulsum" (or
// "premulsum").
func ParseOp(s string) (Op, error) {
	if strings.EqualFold(s, "premulsum") {
		return PreMulSum, nil
	}
	for i, n := range opNames {
		if strings.EqualFold(s, n) {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownOp, s)
}

// Collective names an operation.
type Collective int32

const (
	AllReduce     Collective = iota // every rank gets the reduction of all ranks' buffers
	Broadcast                       // every rank gets root's buffer
	Reduce                          // root gets the reduction of all ranks' buffers
	AllGather                       // every rank gets all ranks' buffers, in rank order
	ReduceScatter                   // rank r gets block r of the reduction
	numCollectives
)

// NumCollectives sizes arrays indexed by Collective.
const NumCollectives = numCollectives

var collectiveNames = [numCollectives]string{"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter"}

// AllCollectives lists every collective.
func AllCollectives() []Collective {
	return []Collective{AllReduce, Broadcast, Reduce, AllGather, ReduceScatter}
}

// Valid reports whether c is a known collective.
func (c Collective) Valid() bool { return c >= 0 && c < numCollectives }

// String gives nccl-tests' binary stem ("all_reduce", ...).
func (c Collective) String() string {
	if !c.Valid() {
		return fmt.Sprintf("Collective(%d)", int32(c))
	}
	return collectiveNames[c]
}

// ParseCollective accepts nccl-tests' names, with or without underscores
// and a "_perf" suffix.
func ParseCollective(s string) (Collective, error) {
	k := strings.TrimSuffix(strings.ToLower(s), "_perf")
	k = strings.ReplaceAll(k, "_", "")
	for i, n := range collectiveNames {
		if strings.ReplaceAll(n, "_", "") == k {
			return Collective(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q", ErrUnknownCollective, s)
}

// Reduces reports whether the collective applies an Op.
func (c Collective) Reduces() bool {
	return c == AllReduce || c == Reduce || c == ReduceScatter
}

// Rooted reports whether the collective has a root rank.
func (c Collective) Rooted() bool { return c == Broadcast || c == Reduce }

package comm

import "github.com/goccl/goccl/collectives"

// Types and constants of the collectives package, re-exported so that
// users import only comm.
type (
	DataType     = collectives.DataType     // element type
	Op           = collectives.Op           // reduction operator
	Collective   = collectives.Collective   // operation
	Registration = collectives.Registration // registered buffer
	Scalar       = collectives.Scalar       // PreMulSum's factor
)

// Element types and reduction operators of the collectives package.
const (
	Int8     = collectives.Int8     // signed 8-bit integer
	Uint8    = collectives.Uint8    // unsigned 8-bit integer
	Int32    = collectives.Int32    // signed 32-bit integer
	Uint32   = collectives.Uint32   // unsigned 32-bit integer
	Int64    = collectives.Int64    // signed 64-bit integer
	Uint64   = collectives.Uint64   // unsigned 64-bit integer
	Float16  = collectives.Float16  // IEEE 754 half precision
	Float32  = collectives.Float32  // IEEE 754 single precision
	Float64  = collectives.Float64  // IEEE 754 double precision
	BFloat16 = collectives.BFloat16 // bfloat16: float32's exponent, 7-bit mantissa
	// Float8E4M3 and Float8E5M2 are the 8-bit floats (OCP E4M3, E5M2).
	Float8E4M3 = collectives.Float8E4M3
	Float8E5M2 = collectives.Float8E5M2 // 8-bit float, 5-bit exponent, 2-bit mantissa

	Sum  = collectives.Sum  // element-wise sum
	Prod = collectives.Prod // element-wise product
	Max  = collectives.Max  // element-wise maximum
	Min  = collectives.Min  // element-wise minimum
	Avg  = collectives.Avg  // sum divided by the number of ranks
)

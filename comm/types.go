package comm

import "github.com/goccl/goccl/collectives"

// Types and constants of the collectives package, re-exported so that
// users import only comm.
type (
	DataType     = collectives.DataType
	Op           = collectives.Op
	Collective   = collectives.Collective
	Registration = collectives.Registration
)

const (
	Int8     = collectives.Int8
	Uint8    = collectives.Uint8
	Int32    = collectives.Int32
	Uint32   = collectives.Uint32
	Int64    = collectives.Int64
	Uint64   = collectives.Uint64
	Float16  = collectives.Float16
	Float32  = collectives.Float32
	Float64  = collectives.Float64
	BFloat16 = collectives.BFloat16

	Sum  = collectives.Sum
	Prod = collectives.Prod
	Max  = collectives.Max
	Min  = collectives.Min
	Avg  = collectives.Avg
)

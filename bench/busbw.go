package bench

import "github.com/goccl/goccl/collectives"

// Shape is what one swept size means for a collective, by nccl-tests'
// conventions: Count is the count argument of the call (per rank for
// AllGather's send and ReduceScatter's receive), Bytes the size printed
// and used for algbw (the larger of the send and receive buffers: the
// whole gathered or scattered array for AllGather and ReduceScatter).
type Shape struct {
	Count     int
	Bytes     int64
	SendBytes int64
	RecvBytes int64
}

// ShapeOf maps a swept size to the call's shape on nranks ranks.
func ShapeOf(coll collectives.Collective, size int64, t collectives.DataType, nranks int) Shape {
	ts := int64(t.Size())
	total := size / ts
	// nccl-tests rounds AllGather's and ReduceScatter's per-rank count
	// down to a multiple of 16 bytes (its GetCollByteCount), so its rows
	// read "0 0" at 8 B on 2 ranks, and ours must too.
	align := max(16/ts, 1)
	switch coll {
	case collectives.AllGather:
		per := total / int64(nranks) / align * align
		return Shape{Count: int(per), Bytes: per * ts * int64(nranks), SendBytes: per * ts, RecvBytes: per * ts * int64(nranks)}
	case collectives.ReduceScatter:
		per := total / int64(nranks) / align * align
		return Shape{Count: int(per), Bytes: per * ts * int64(nranks), SendBytes: per * ts * int64(nranks), RecvBytes: per * ts}
	}
	return Shape{Count: int(total), Bytes: total * ts, SendBytes: total * ts, RecvBytes: total * ts}
}

// BusFactor is nccl-tests' correction from algorithm to bus bandwidth
// (doc/PERFORMANCE.md): 2(n-1)/n for AllReduce, (n-1)/n for ReduceScatter
// and AllGather, 1 for Broadcast and Reduce.
func BusFactor(coll collectives.Collective, nranks int) float64 {
	n := float64(nranks)
	switch coll {
	case collectives.AllReduce:
		return 2 * (n - 1) / n
	case collectives.ReduceScatter, collectives.AllGather:
		return (n - 1) / n
	}
	return 1
}

// Bandwidths returns algbw and busbw in GB/s (10^9 bytes) for bytes moved
// in seconds.
func Bandwidths(coll collectives.Collective, bytes int64, seconds float64, nranks int) (algbw, busbw float64) {
	if seconds <= 0 {
		return 0, 0
	}
	algbw = float64(bytes) / 1e9 / seconds
	return algbw, algbw * BusFactor(coll, nranks)
}

package recorder

import (
	"math/bits"
	"time"
)

// Statistics per (call kind, size class): a size class holds the calls
// of more than half its bytes up to its bytes (powers of two), and each
// keeps a histogram of durations in quarter octaves, which End updates in
// a few nanoseconds. A percentile is its bucket's upper bound: never
// below the exact value, at most a quarter above it.

const (
	sizeClasses = 64
	subBuckets  = 4 // per octave
	// octaves of nanoseconds: up to 2^40 ns (18 minutes); longer calls
	// land in the last bucket.
	octaves  = 41
	nBuckets = octaves * subBuckets
)

type cell struct {
	count, bytes uint64
	sum, max     int64 // ns
	hist         [nBuckets]uint64
}

type stats struct {
	nranks int
	cells  [numKinds][sizeClasses]*cell
}

// sizeClass is the smallest c with bytes <= 2^c.
func sizeClass(bytes int64) int {
	if bytes <= 1 {
		return 0
	}
	return bits.Len64(uint64(bytes - 1))
}

// bucket of a duration: octave o = bits.Len(d), then the two bits after
// the leading one.
func bucket(d int64) int {
	if d < subBuckets {
		return int(max(d, 0))
	}
	o := bits.Len64(uint64(d))
	i := o*subBuckets + int(uint64(d)>>(o-3)&(subBuckets-1)) - 2*subBuckets
	return min(i, nBuckets-1)
}

// bucketUpper is the largest duration bucket i holds.
func bucketUpper(i int) int64 {
	if i < subBuckets {
		return int64(i)
	}
	o := (i + 2*subBuckets) / subBuckets
	sub := (i + 2*subBuckets) % subBuckets
	lo := int64(1)<<(o-1) + int64(sub)<<(o-3)
	return lo + int64(1)<<(o-3) - 1
}

func (s *stats) add(k Kind, bytes int64, d int64) {
	if k >= numKinds {
		return
	}
	sc := sizeClass(bytes)
	c := s.cells[k][sc]
	if c == nil {
		c = new(cell) // once per (kind, size class) in the communicator's life
		s.cells[k][sc] = c
	}
	c.count++
	c.bytes += uint64(max(bytes, 0))
	c.sum += d
	c.max = max(c.max, d)
	c.hist[bucket(d)]++
}

// Stat summarises the finished calls of one kind and size class.
type Stat struct {
	Call string `json:"call"`
	// SizeClass: the calls of more than SizeClass/2 bytes up to SizeClass
	// (nccl-tests' size: the whole gathered array for AllGather).
	SizeClass int64         `json:"size_class"`
	Count     uint64        `json:"count"`
	Bytes     uint64        `json:"bytes"`
	Total     time.Duration `json:"total_ns"`
	P50       time.Duration `json:"p50_ns"`
	P90       time.Duration `json:"p90_ns"`
	P99       time.Duration `json:"p99_ns"`
	Max       time.Duration `json:"max_ns"`
	// AlgBW and BusBW are in GB/s (10^9 bytes) over the total time; BusBW
	// applies nccl-tests' factor for the kind and the ranks.
	AlgBW float64 `json:"algbw_gbps"`
	BusBW float64 `json:"busbw_gbps"`
	// Link is the ceiling of the links between the ranks (Meta.LinkGBs)
	// and LinkFraction BusBW over it; both 0 when the ceiling is unknown.
	Link         float64 `json:"link_gbps,omitempty"`
	LinkFraction float64 `json:"link_fraction,omitempty"`
	// Buckets is the histogram, cumulative: Buckets[i] calls took at most
	// Bounds[i].
	Bounds  []time.Duration `json:"-"`
	Buckets []uint64        `json:"-"`
}

// Stats returns a Stat per kind and size class that finished calls, in
// kind then size order.
func (r *Ring) Stats() []Stat {
	if r == nil {
		return nil
	}
	var out []Stat
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count()
	for k := range r.stats.cells {
		for sc, c := range r.stats.cells[k] {
			if c == nil || c.count == 0 {
				continue
			}
			st := c.stat(Kind(k), sc, r.stats.nranks)
			if l := r.meta.LinkGBs; l > 0 {
				st.Link, st.LinkFraction = l, st.BusBW/l
			}
			out = append(out, st)
		}
	}
	return out
}

func (c *cell) stat(k Kind, sc int, nranks int) Stat {
	st := Stat{Call: k.String(), SizeClass: int64(1) << sc, Count: c.count, Bytes: c.bytes,
		Total: time.Duration(c.sum), Max: time.Duration(c.max)}
	if c.sum > 0 {
		st.AlgBW = float64(c.bytes) / float64(c.sum) // bytes/ns = GB/s
		st.BusBW = st.AlgBW * busFactor(k, nranks)
	}
	var cum uint64
	last := 0
	for i, n := range c.hist {
		if n > 0 {
			last = i
		}
	}
	for i := 0; i <= last; i++ {
		cum += c.hist[i]
		st.Bounds = append(st.Bounds, time.Duration(bucketUpper(i)))
		st.Buckets = append(st.Buckets, cum)
	}
	q := func(p float64) time.Duration {
		want := uint64(p*float64(c.count) + 0.5)
		want = max(want, 1)
		for i, n := range st.Buckets {
			if n >= want {
				return min(st.Bounds[i], st.Max)
			}
		}
		return st.Max
	}
	st.P50, st.P90, st.P99 = q(0.50), q(0.90), q(0.99)
	return st
}

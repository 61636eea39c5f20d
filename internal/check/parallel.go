package check

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
)

// chunk is the number of elements one worker handles at a time: small
// enough that its scratch stays in cache, large enough to amortize the
// hand-off.
const chunk = 1 << 15

// parallel calls f on consecutive chunks of [0, n) from GOMAXPROCS
// goroutines; small n runs inline.
func parallel(n int, f func(first, count int)) {
	if n <= chunk {
		if n > 0 {
			f(0, n)
		}
		return
	}
	workers := runtime.GOMAXPROCS(0)
	if nc := (n + chunk - 1) / chunk; workers > nc {
		workers = nc
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := int(next.Add(chunk)) - chunk
				if first >= n {
					return
				}
				f(first, min(chunk, n-first))
			}
		}()
	}
	wg.Wait()
}

func errBadRank(rank, n int) error {
	return fmt.Errorf("%w: rank %d not in [0,%d)", ErrBadCase, rank, n)
}

func errBadLen(what string, got, want int) error {
	return fmt.Errorf("%w: %s buffer holds %d bytes, want %d", ErrBadCase, what, got, want)
}

package host

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRunLock: TryLock fails while the lock is held and succeeds once it
// is given back, and goroutines that contend for it (as Close does with
// a Run) each get it alone: their unguarded increments all survive.
func TestRunLock(t *testing.T) {
	var l runLock
	require.True(t, l.TryLock())
	require.False(t, l.TryLock(), "held")
	l.Unlock()
	require.True(t, l.TryLock())
	l.Unlock()

	const workers, rounds = 4, 2000
	n := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l.Lock()
				n++
				l.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, workers*rounds, n)
}

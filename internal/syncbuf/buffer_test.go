package syncbuf

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Lines written from many goroutines arrive whole, none lost, while
// another goroutine reads.
func TestConcurrentWrites(t *testing.T) {
	const writers, lines = 8, 200
	var b Buffer
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				_ = b.String()
			}
		}
	}()
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < lines; i++ {
				fmt.Fprintf(&b, "w%d-%d\n", w, i)
			}
		}()
	}
	wg.Wait()
	close(stop)
	got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	var want []string
	for w := 0; w < writers; w++ {
		for i := 0; i < lines; i++ {
			want = append(want, fmt.Sprintf("w%d-%d", w, i))
		}
	}
	sort.Strings(got)
	sort.Strings(want)
	assert.Equal(t, want, got)
}

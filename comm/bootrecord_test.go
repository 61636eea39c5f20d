package comm

import (
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A failed call stops waiting for the records that cannot come: rank 0
// marks a leaf whose connection closed, tells the other leaves so (also
// when the communicator had failed already), and a leaf that lost rank 0
// expects no record at all.
func TestRecordMayCome(t *testing.T) {
	for _, tc := range []struct {
		name         string
		failedBefore bool // rank 1 aborts before rank 2 goes
	}{
		{"first failure", false},
		{"after an abort", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			comms := initGroup(t, 3, testOpts(&fakeFactory{}))
			for _, c := range comms {
				for r := range 3 {
					if r != c.Rank() {
						require.True(t, c.boot.recordMayCome(r), "rank %d, of rank %d, before any failure", c.Rank(), r)
					}
				}
			}
			if tc.failedBefore {
				comms[1].Abort(errors.New("test abort"))
				for _, c := range comms {
					require.Eventually(t, func() bool { return c.boot.failure() != nil }, 10*time.Second, 5*time.Millisecond, "rank %d learns of the abort", c.Rank())
				}
				assert.True(t, comms[1].boot.recordMayCome(2), "an abort says nothing of rank 2's process")
			}
			// Rank 2's process "dies": its connection closes without a goodbye.
			require.NoError(t, comms[2].boot.peers[0].conn.Close())
			require.Eventually(t, func() bool { return !comms[0].boot.recordMayCome(2) }, 10*time.Second, 5*time.Millisecond, "rank 0 sees rank 2 gone")
			require.Eventually(t, func() bool { return !comms[1].boot.recordMayCome(2) }, 10*time.Second, 5*time.Millisecond, "rank 0 tells rank 1")
			assert.True(t, comms[1].boot.recordMayCome(0), "rank 0 is there")
			assert.True(t, comms[0].boot.recordMayCome(1), "rank 1 is there")
			// Rank 0 goes: nothing more reaches rank 1.
			require.NoError(t, comms[0].boot.Close())
			require.Eventually(t, func() bool { return !comms[1].boot.recordMayCome(0) }, 10*time.Second, 5*time.Millisecond, "rank 1 lost rank 0")
		})
	}
}

// A failure notice says a rank is gone only when its cause is describe's
// own for a closed or silent connection, not one that quotes it.
func TestLostCause(t *testing.T) {
	b := &tcpBootstrap{hbTimeout: 5 * time.Second}
	for _, tc := range []struct {
		msg  string
		lost bool
	}{
		{b.describe(io.EOF).Error(), true},
		{b.describe(os.ErrDeadlineExceeded).Error(), true},
		{"timed out waiting for peer: this rank stalled for 7s (then: " + b.describe(os.ErrDeadlineExceeded).Error() + ")", false},
		{"called Abort: " + b.describe(io.EOF).Error(), false},
		{"timed out waiting for peer: host: rank 1 waited 3s for rank 3 at step 5", false},
	} {
		assert.Equal(t, tc.lost, lostCause(tc.msg), "%q", tc.msg)
	}
}

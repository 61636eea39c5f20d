package recorder

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestExplainGone: ranks without a record whose fate the caller knows are
// named as the ones that never reached the call the others wait in, as
// long as no rank has come out of it; else only their fate is told.
func TestExplainGone(t *testing.T) {
	now := t0.Add(3100 * time.Millisecond)
	stopped := "stopped by a signal, not running"
	cases := []struct {
		name string
		recs []*Record
		gone map[int]string
		want string
	}{
		{"stopped", []*Record{
			rec(0, call("AllReduce", 5, "failed")), rec(1, call("AllReduce", 5, "failed")), rec(2, call("AllReduce", 5, "started")), nil,
		}, map[int]string{3: stopped},
			"rank 3 never reached AllReduce #5 (float32, 4 MiB); ranks 0-2 wait in it since 3.1 s; rank 3 gave no record (stopped by a signal, not running)"},
		{"fate unknown", []*Record{
			rec(0, call("AllReduce", 5, "failed")), rec(1, call("AllReduce", 5, "failed")), rec(2, call("AllReduce", 5, "started")), nil,
		}, map[int]string{},
			"ranks 0-2 wait in AllReduce #5 (float32, 4 MiB) since 3.1 s; rank 3 gave no record (why)"},
		{"gone and behind", []*Record{
			rec(0, call("AllReduce", 5, "failed")), nil, rec(2, call("AllReduce", 4, "started")), nil,
		}, map[int]string{1: "killed by signal 9 (killed)", 3: "killed by signal 9 (killed)"},
			"ranks 1 and 3 never reached AllReduce #5 (float32, 4 MiB); rank 2 has not entered it; rank 0 waits in it since 3.1 s; ranks 1 and 3 gave no record (killed by signal 9 (killed)); rank 2's last call: AllReduce #4, started"},
		{"two fates", []*Record{
			rec(0, call("AllReduce", 5, "failed")), nil, rec(2, call("AllReduce", 5, "failed")), nil,
		}, map[int]string{1: "killed by signal 9 (killed)", 3: stopped},
			"ranks 1 and 3 never reached AllReduce #5 (float32, 4 MiB); ranks 0 and 2 wait in it since 3.1 s; rank 1 gave no record (killed by signal 9 (killed)); rank 3 gave no record (stopped by a signal, not running)"},
		{"someone came out", []*Record{
			rec(0, call("AllReduce", 5, "failed")), rec(1, call("AllReduce", 5, "finished")), rec(2, call("AllReduce", 5, "failed")), nil,
		}, map[int]string{3: stopped},
			"ranks 0 and 2 wait in AllReduce #5 (float32, 4 MiB) since 3.1 s; rank 1 finished it; rank 3 gave no record (stopped by a signal, not running)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ExplainGone(4, tc.recs, now, "why", tc.gone))
		})
	}
	// Without fates it is ExplainWhy.
	recs := cases[0].recs
	assert.Equal(t, ExplainWhy(4, recs, now, "why"), ExplainGone(4, recs, now, "why", nil))
}

package faults

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/goccl/goccl/launcher"
)

// Scenario 12: one rank's call goes wrong while its peers' does not, and
// the rank carries on. Every call takes a number on every rank, the host
// backend's descriptor carries it, and ranks that meet in calls of
// different numbers all fail, naming both calls, instead of pairing one
// rank's next call with the others' current one (silently wrong results,
// then a hang at the end). Run under the launcher, 3 ranks, 12 AllReduces;
// rank 1's 6th call (iteration 5, call #6) is the odd one.
func TestCallNumbers(t *testing.T) {
	const np, odd, iters, count = 3, 1, 12, 4096
	type want struct {
		// Every rank's FAILED line contains these, rank 1's its own.
		survivors, odd []string
		field          string // the report field that must read true
	}
	desc := fmt.Sprintf("all_reduce of %d int32 sum", count)
	cases := []struct {
		name string
		env  []string
		want want
	}{
		// A count of 0 on rank 1 only returns there at once; its next call
		// (#7) meets the others' #6.
		{"zero-count", []string{"FAULTS_ODD_1=5:zero"}, want{
			survivors: []string{fmt.Sprintf("rank 1 is in call #7 (%s), rank", desc), fmt.Sprintf("in #6 (%s)", desc)},
			odd:       []string{fmt.Sprintf("rank 0 is in call #6 (%s), rank 1 in #7 (%s)", desc, desc)},
			field:     "callmismatch"}},
		// A call rank 1 rejects (nil send buffer), the error ignored.
		{"rejected-call", []string{"FAULTS_ODD_1=5:invalid"}, want{
			survivors: []string{"rank 1 is in call #7 (", "in #6 ("},
			odd:       []string{"rank 0 is in call #6 (", "rank 1 in #7 ("},
			field:     "callmismatch"}},
		// Count 0 on rank 1's last call: it closes; the others' last call
		// (#12) ends at once, naming it.
		{"zero-count-last", []string{fmt.Sprintf("FAULTS_ODD_1=%d:zero", iters-1)}, want{
			survivors: []string{"rank 1 failed", "peer closed its communicator after call #12", "is in call #12", "left at once"},
			field:     "peerclosed"}},
		// A call skipped outright, results unchecked: the numbers cannot
		// tell (rank 1's next call is its #6), so rank 1 computes wrong
		// data unknowingly; the others' surplus last call ends at once.
		{"skipped-call", []string{"FAULTS_ODD_1=5:skip", "FAULTS_NOCHECK=1"}, want{
			survivors: []string{"rank 1 failed", "peer closed its communicator after call #11", "is in call #12)"},
			field:     "peerclosed"}},
		// GOCCL_CHECK compares the arguments first: every rank fails at #6.
		{"zero-count-checked", []string{"FAULTS_ODD_1=5:zero", "GOCCL_CHECK=1"}, want{
			survivors: []string{fmt.Sprintf("rank 1 called all_reduce count=0, rank 0 count=%d", count)},
			field:     "mismatch"}},
	}
	var worstAll time.Duration
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := launch(launcher.Config{
				NP: np, Env: rankEnv(append([]string{"FAULTS_COLL=allreduce", "FAULTS_COUNT=" + strconv.Itoa(count),
					"FAULTS_ITERS=" + strconv.Itoa(iters), "FAULTS_TERM=catch"}, tc.env...)...),
				Grace: 10 * time.Second, Timeout: 120 * time.Second,
			})
			tg := j.tg
			t0 := stamp(t, tg.expect(t, odd, "ODD", 30*time.Second))
			var last time.Time
			for r := 0; r < np; r++ {
				if r == odd && tc.want.odd == nil {
					continue
				}
				l := tg.expect(t, r, "FAILED", 30*time.Second)
				last = maxTime(last, stamp(t, l))
				assert.Equal(t, "true", field(l, tc.want.field), "rank %d: %s", r, l)
				msg := rest(l, "err")
				wants := tc.want.survivors
				if r == odd {
					wants = tc.want.odd
				} else if tc.want.field == "peerclosed" {
					assert.Equal(t, strconv.Itoa(odd), field(l, "peer"), "rank %d names the odd rank: %s", r, l)
				}
				for _, w := range wants {
					assert.Contains(t, msg, w, "rank %d", r)
				}
				t.Logf("rank %d: %s", r, msg)
			}
			res, _ := j.failedRank(t, 30*time.Second, "a rank still runs 30 s after the others failed")
			for r := 0; r < np; r++ {
				for _, l := range tg.rankLines(r) {
					assert.NotContains(t, l, "BADRESULT", "rank %d computed wrong data", r)
				}
			}
			took := last.Sub(t0)
			worstAll = max(worstAll, took)
			t.Logf("every rank failed within %v of rank 1's odd call; launcher: %v", took, res.err)
		})
	}
	t.Logf("scenario 12: worst time from the odd call to the last rank's error %v", worstAll)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package recorder

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Explain names, in one line a person can act on, why a job of nranks
// ranks is stuck, from the ranks' records (recs[r] is rank r's, nil when
// it gave none) at time now:
//
//	rank 3 has not entered AllReduce #1042 (float32, 4 MiB); ranks 0-2 wait in it since 30.2 s; rank 3's last call: Broadcast #1041, finished
//
// The call is the highest numbered one some rank is in. Ranks in calls of
// different kinds under that number are reported as a mismatch.
func Explain(nranks int, recs []*Record, now time.Time) string {
	return ExplainWhy(nranks, recs, now, "stopped, hung or dead")
}

// ExplainWhy is Explain with the reason given for ranks without a record.
func ExplainWhy(nranks int, recs []*Record, now time.Time, noRecordWhy string) string {
	return ExplainGone(nranks, recs, now, noRecordWhy, nil)
}

// ExplainGone is ExplainWhy where what became of some ranks without a
// record is known (gone[r], e.g. "stopped by a signal, not running", as a
// launcher sees it). While no rank has finished the call the others are
// in, such a rank is the one that never reached it:
//
//	rank 3 never reached AllReduce #5 (int32, 4 KiB); ranks 0-2 wait in it since 3.1 s; rank 3 gave no record (stopped by a signal, not running)
func ExplainGone(nranks int, recs []*Record, now time.Time, noRecordWhy string, gone map[int]string) string {
	var target uint64
	for _, r := range recs {
		if r == nil {
			continue
		}
		for i := range r.Calls {
			c := &r.Calls[i]
			if top := max(c.Seq, c.SeqLast); top > target && c.StateOf().InProgress() {
				target = top
			}
		}
	}
	if target == 0 {
		if line := explainP2P(nranks, recs, now, noRecordWhy); line != "" {
			return line
		}
		return explainIdle(nranks, recs)
	}
	var (
		noRecord, notEntered, passed []int
		lost                         []int                // no record, and gone as the caller knows
		in                           = map[string][]int{} // call description -> ranks in it
		since                        = map[string]int64{} // description -> earliest entry
		last                         = map[int]Call{}
	)
	for r := 0; r < nranks; r++ {
		var rec *Record
		if r < len(recs) {
			rec = recs[r]
		}
		if rec == nil {
			if _, ok := gone[r]; ok {
				lost = append(lost, r)
			} else {
				noRecord = append(noRecord, r)
			}
			continue
		}
		c, ok := rec.Find(target)
		switch {
		case ok && c.StateOf().InProgress():
			d := c.Describe()
			in[d] = append(in[d], r)
			t := c.Start
			if t == 0 {
				t = c.Enq
			}
			if s, seen := since[d]; t != 0 && (!seen || t < s) {
				since[d] = t
			}
		case ok:
			passed = append(passed, r)
		default:
			notEntered = append(notEntered, r)
			if l, ok := rec.Last(); ok {
				last[r] = l
			}
		}
	}
	descs := make([]string, 0, len(in))
	for d := range in {
		descs = append(descs, d)
	}
	// The call most ranks are in first: the odd ones out are named after.
	sort.Slice(descs, func(i, j int) bool {
		if len(in[descs[i]]) != len(in[descs[j]]) {
			return len(in[descs[i]]) > len(in[descs[j]])
		}
		return in[descs[i]][0] < in[descs[j]][0]
	})
	waitFor := func(d string) string {
		if s, ok := since[d]; ok && now.Sub(time.Unix(0, s)) >= 50*time.Millisecond {
			return fmt.Sprintf(" since %.1f s", now.Sub(time.Unix(0, s)).Seconds())
		}
		return ""
	}
	var parts []string
	if len(descs) > 1 {
		var ms []string
		for _, d := range descs[1:] {
			ms = append(ms, fmt.Sprintf("%s in %s", ranks(in[d]), d))
		}
		parts = append(parts, fmt.Sprintf("ranks are in different calls #%d: %s, while %s %s in %s%s", target,
			strings.Join(ms, "; "), ranks(in[descs[0]]), verb(in[descs[0]], "is", "are"), descs[0], waitFor(descs[0])))
	} else {
		d := descs[0]
		// A rank gone without a record while none has come out of the
		// call is the one the others wait for.
		neverReached := len(lost) > 0 && len(passed) == 0
		switch {
		case len(notEntered) > 0 || neverReached:
			// The ranks gone first: those that have not entered for
			// other reasons may yet be coming out of the call before.
			it := d
			if neverReached {
				parts = append(parts, fmt.Sprintf("%s never reached %s", ranks(lost), d))
				it = "it"
			}
			if len(notEntered) > 0 {
				parts = append(parts, fmt.Sprintf("%s %s not entered %s", ranks(notEntered), verb(notEntered, "has", "have"), it))
			}
			parts = append(parts, fmt.Sprintf("%s %s in it%s", ranks(in[d]), verb(in[d], "waits", "wait"), waitFor(d)))
		case len(noRecord) > 0 || len(lost) > 0:
			parts = append(parts, fmt.Sprintf("%s %s in %s%s", ranks(in[d]), verb(in[d], "waits", "wait"), d, waitFor(d)))
		default:
			parts = append(parts, fmt.Sprintf("every rank is in %s%s", d, waitFor(d)))
		}
	}
	if len(descs) > 1 && len(notEntered) > 0 {
		parts = append(parts, fmt.Sprintf("%s %s not entered call #%d", ranks(notEntered), verb(notEntered, "has", "have"), target))
	}
	if len(passed) > 0 {
		parts = append(parts, fmt.Sprintf("%s finished it", ranks(passed)))
	}
	if len(noRecord) > 0 {
		parts = append(parts, fmt.Sprintf("%s gave no record (%s)", ranks(noRecord), noRecordWhy))
	}
	parts = append(parts, goneParts(lost, gone)...)
	for _, r := range notEntered {
		if w, ok := recs[r].P2PWait(); ok {
			parts = append(parts, fmt.Sprintf("rank %d waits in a %s%s", r, w.Describe(), sinceCall(&w, now)))
		} else if l, ok := last[r]; ok {
			s := fmt.Sprintf("rank %d's last call: %s #%d, %s", r, l.Call, l.Seq, l.State)
			if recs[r].Reason == "close" {
				s += ", then it closed its communicator"
			}
			parts = append(parts, s)
		} else {
			parts = append(parts, fmt.Sprintf("rank %d made no call yet", r))
		}
	}
	return strings.Join(parts, "; ")
}

// goneParts says, for the ranks lost, what became of them, ranks with the
// same fate together.
func goneParts(lost []int, gone map[int]string) []string {
	var fates []string
	by := map[string][]int{}
	for _, r := range lost {
		f := gone[r]
		if by[f] == nil {
			fates = append(fates, f)
		}
		by[f] = append(by[f], r)
	}
	out := make([]string, 0, len(fates))
	for _, f := range fates {
		out = append(out, fmt.Sprintf("%s gave no record (%s)", ranks(by[f]), f))
	}
	return out
}

// explainP2P is the line when no rank is in a numbered call but some wait
// in Sends and Recvs, which take no number: who waits in what, and what
// the peers they wait for did last.
func explainP2P(nranks int, recs []*Record, now time.Time, noRecordWhy string) string {
	var parts []string
	waiting := map[int]bool{}
	var peers []int
	for r := 0; r < nranks && r < len(recs); r++ {
		if recs[r] == nil {
			continue
		}
		if w, ok := recs[r].P2PWait(); ok {
			waiting[r] = true
			parts = append(parts, fmt.Sprintf("rank %d waits in a %s%s", r, w.Describe(), sinceCall(&w, now)))
			peers = append(peers, w.Peers()...)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Ints(peers)
	var noRecord []int
	for i, p := range peers {
		if (i > 0 && peers[i-1] == p) || waiting[p] || p < 0 || p >= nranks {
			continue
		}
		var rec *Record
		if p < len(recs) {
			rec = recs[p]
		}
		if rec == nil {
			noRecord = append(noRecord, p)
			continue
		}
		l, ok := rec.LastAny()
		var s string
		switch {
		case !ok:
			s = fmt.Sprintf("rank %d made no call yet", p)
		case l.Seq > 0:
			s = fmt.Sprintf("rank %d's last call: %s #%d, %s", p, l.Call, l.Seq, l.State)
		default:
			s = fmt.Sprintf("rank %d's last call: %s, %s", p, l.Describe(), l.State)
		}
		if rec.Reason == "close" {
			s += ", then it closed its communicator"
		}
		parts = append(parts, s)
	}
	if len(noRecord) > 0 {
		parts = append(parts, fmt.Sprintf("%s gave no record (%s)", ranks(noRecord), noRecordWhy))
	}
	return strings.Join(parts, "; ")
}

// sinceCall says how long a call has waited, from its start.
func sinceCall(c *Call, now time.Time) string {
	t := c.Start
	if t == 0 {
		t = c.Enq
	}
	if d := now.Sub(time.Unix(0, t)); t != 0 && d >= 50*time.Millisecond {
		return fmt.Sprintf(" since %.1f s", d.Seconds())
	}
	return ""
}

// explainIdle is the line when no rank is in a call.
func explainIdle(nranks int, recs []*Record) string {
	var parts []string
	var missing []int
	byLast := map[string][]int{}
	var keys []string
	for r := 0; r < nranks; r++ {
		if r >= len(recs) || recs[r] == nil {
			missing = append(missing, r)
			continue
		}
		k := "" // no call yet
		if l, ok := recs[r].Last(); ok {
			k = fmt.Sprintf("%s #%d, %s", l.Call, l.Seq, l.State)
		}
		if byLast[k] == nil {
			keys = append(keys, k)
		}
		byLast[k] = append(byLast[k], r)
	}
	parts = append(parts, "no rank is in a call")
	for _, k := range keys {
		if k == "" {
			parts = append(parts, fmt.Sprintf("%s made no call yet", ranks(byLast[k])))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: last call %s", ranks(byLast[k]), k))
	}
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("%s gave no record", ranks(missing)))
	}
	return strings.Join(parts, "; ")
}

func verb(rs []int, one, many string) string {
	if len(rs) == 1 {
		return one
	}
	return many
}

// ranks writes a sorted set of ranks as "rank 3" or "ranks 0-2 and 4-7".
func ranks(rs []int) string {
	rs = append([]int(nil), rs...)
	sort.Ints(rs)
	var spans []string
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		switch {
		case j == i:
			spans = append(spans, strconv.Itoa(rs[i]))
		case j == i+1:
			spans = append(spans, strconv.Itoa(rs[i]), strconv.Itoa(rs[j]))
		default:
			spans = append(spans, fmt.Sprintf("%d-%d", rs[i], rs[j]))
		}
		i = j + 1
	}
	if len(rs) == 1 {
		return "rank " + spans[0]
	}
	if len(spans) == 1 {
		return "ranks " + spans[0]
	}
	return "ranks " + strings.Join(spans[:len(spans)-1], ", ") + " and " + spans[len(spans)-1]
}

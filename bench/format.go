package bench

import (
	"fmt"
	"io"
	"strconv"
)

// Result is one timed placement (out-of-place or in-place) of one row.
type Result struct {
	TimeUS float64 `json:"time_us"`
	AlgBW  float64 `json:"algbw_gbps"`
	BusBW  float64 `json:"busbw_gbps"`
	Wrong  int64   `json:"wrong"` // -1 when not checked
}

// Row is one line of the table.
type Row struct {
	Size       int64  `json:"size"`
	Count      int    `json:"count"`
	Type       string `json:"type"`
	RedOp      string `json:"redop"`
	Root       int    `json:"root"`
	OutOfPlace Result `json:"out_of_place"`
	InPlace    Result `json:"in_place"`
}

// Best is the faster of the row's two placements, as nccl-tests' summary
// and bench/nccl/compare.py take it; a placement not timed (0 us) never
// wins.
func (r Row) Best() Result {
	if r.InPlace.TimeUS > 0 && (r.OutOfPlace.TimeUS <= 0 || r.InPlace.TimeUS < r.OutOfPlace.TimeUS) {
		return r.InPlace
	}
	return r.OutOfPlace
}

// DeviceLine is one rank's entry under "# Using devices".
type DeviceLine struct {
	Rank    int    `json:"rank"`
	Pid     int    `json:"pid"`
	Host    string `json:"host"`
	Ordinal int    `json:"device"` // -1: host memory
	BusID   string `json:"bus_id,omitempty"`
	Name    string `json:"name"`
	Backend string `json:"backend"`
}

// writeHeader prints nccl-tests' preamble and column heads.
func writeHeader(w io.Writer, c *Config, devs []DeviceLine) {
	step, kind := c.StepBytes, "bytes"
	if c.StepFactor > 1 {
		step, kind = c.StepFactor, "factor"
	}
	check := c.Check
	fmt.Fprintf(w, "# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: %d\n",
		c.GPUs, c.MinBytes, c.MaxBytes, step, kind, c.Warmup, c.Iters, check, c.Graph)
	if c.Blocking {
		fmt.Fprintf(w, "# Blocking Enabled: wait for completion and barrier after each collective \n")
	}
	fmt.Fprintf(w, "#\n# Using devices\n")
	for _, d := range devs {
		fmt.Fprintln(w, d.String())
	}
	fmt.Fprintf(w, "#\n")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// String gives nccl-tests' "#  Rank ... device ..." line.
func (d DeviceLine) String() string {
	bus := d.BusID
	if bus == "" {
		bus = d.Backend
	}
	return fmt.Sprintf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s", d.Rank, 0, d.Pid, d.Host, d.Ordinal, bus, d.Name)
}

// FormatTime renders microseconds as nccl-tests 2.19 does: two decimals,
// fewer once the time outgrows its 7 columns.
func FormatTime(us float64) string {
	switch {
	case us >= 100000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 10000:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

// FormatRow renders one table line (no newline).
func FormatRow(r Row) string {
	s := fmt.Sprintf("%12d  %12d  %8s  %6s  %6d", r.Size, r.Count, r.Type, r.RedOp, r.Root)
	for _, p := range []Result{r.OutOfPlace, r.InPlace} {
		wrong := "N/A"
		if p.Wrong >= 0 {
			wrong = strconv.FormatInt(p.Wrong, 10)
		}
		s += fmt.Sprintf("  %7s  %6.2f  %6.2f  %6s", FormatTime(p.TimeUS), p.AlgBW, p.BusBW, wrong)
	}
	return s
}

// writeFooter prints nccl-tests' closing lines.
func writeFooter(w io.Writer, errors int, avgBus float64) {
	status := "OK"
	if errors > 0 {
		status = "FAILED"
	}
	fmt.Fprintf(w, "# Out of bounds values : %d %s\n", errors, status)
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.6g \n", avgBus)
	fmt.Fprintf(w, "#\n")
}

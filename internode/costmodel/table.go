package costmodel

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccl/goccl/internal/units"
)

// Usage is `goccl model`'s help.
const Usage = `usage: goccl model [flags]

Prints what the cost model predicts for collectives across nodes: each
leg's bytes per GPU and time at the links' line rates, the total, algbw
and busbw as nccl-tests defines them. Arithmetic only: nothing is run.

flags:
  --nodes LIST        node counts (default 2,4,8,16,32,64)
  --gpus N            GPUs per node (default 8)
  --nvlink GBS        NVLink GB/s per GPU and direction (default 450: 18 NVLink4 links)
  --nics N            NICs per node (default 8)
  --nic-gbps GBPS     line rate of one NIC in Gb/s (default 400)
  --sizes LIST        sizes, nccl-tests' whole buffer: 1M, 1G, ... (default 1M,1G)
  --colls LIST        all_reduce, reduce_scatter, all_gather, broadcast (default all four)
  --schedules LIST    flat, ring, tree, direct (default all four)
  --lat-nvlink D      latency of a step inside a node (default 1us)
  --lat-net D         latency of a step between nodes (default 5us)
  --markdown          print markdown tables
`

// Config is one `goccl model` invocation.
type Config struct {
	Nodes      []int
	GPUs       int
	NVLinkGBs  float64
	NICs       int
	NICGbps    float64
	Sizes      []int64
	Colls      []Collective
	Schedules  []Schedule
	NVLinkStep time.Duration
	NetStep    time.Duration
	Markdown   bool
}

// ParseArgs reads `goccl model`'s flags; -h gives flag.ErrHelp, every
// other error wraps ErrInvalid and names the flag.
func ParseArgs(args []string) (Config, error) {
	fs := flag.NewFlagSet("goccl model", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	nodes := fs.String("nodes", "2,4,8,16,32,64", "")
	sizes := fs.String("sizes", "1M,1G", "")
	colls := fs.String("colls", "all_reduce,reduce_scatter,all_gather,broadcast", "")
	scheds := fs.String("schedules", "flat,ring,tree,direct", "")
	cfg := Config{}
	fs.IntVar(&cfg.GPUs, "gpus", 8, "")
	fs.Float64Var(&cfg.NVLinkGBs, "nvlink", DefaultNVLinkGBs, "")
	fs.IntVar(&cfg.NICs, "nics", 8, "")
	fs.Float64Var(&cfg.NICGbps, "nic-gbps", 400, "")
	fs.DurationVar(&cfg.NVLinkStep, "lat-nvlink", time.Microsecond, "")
	fs.DurationVar(&cfg.NetStep, "lat-net", 5*time.Microsecond, "")
	fs.BoolVar(&cfg.Markdown, "markdown", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("%w: unexpected arguments %q", ErrInvalid, fs.Args())
	}
	var err error
	if cfg.Nodes, err = parseList("nodes", *nodes, func(s string) (int, error) {
		v, err := strconv.Atoi(s)
		if err == nil && v < 1 {
			err = errors.New("at least 1")
		}
		return v, err
	}); err != nil {
		return Config{}, err
	}
	if cfg.Sizes, err = parseList("sizes", *sizes, func(s string) (int64, error) {
		v, err := units.ParseSize(s)
		if err == nil && v < 1 {
			err = errors.New("at least 1 byte")
		}
		return v, err
	}); err != nil {
		return Config{}, err
	}
	if cfg.Colls, err = parseList("colls", *colls, ParseCollective); err != nil {
		return Config{}, err
	}
	if cfg.Schedules, err = parseList("schedules", *scheds, ParseSchedule); err != nil {
		return Config{}, err
	}
	for _, n := range cfg.Nodes {
		if err := cfg.system(n).Validate(); err != nil {
			return Config{}, fmt.Errorf("--nodes %d: %w", n, err)
		}
	}
	return cfg, nil
}

// parseList reads a comma-separated flag value.
func parseList[T any](flagName, s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				return nil, fmt.Errorf("--%s: %w", flagName, err)
			}
			return nil, fmt.Errorf("%w: --%s %q: %v", ErrInvalid, flagName, f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

func (c *Config) system(nodes int) System {
	return System{Nodes: nodes, GPUs: c.GPUs, NVLinkGBs: c.NVLinkGBs, NICs: c.NICs, NICGbps: c.NICGbps,
		NVLinkStep: c.NVLinkStep, NetStep: c.NetStep}
}

// Write prints one table per collective and size: every node count under
// every schedule.
func Write(w io.Writer, cfg Config) error {
	sys := cfg.system(0)
	fmt.Fprintf(w, "%d GPUs a node; NVLink %s GB/s a GPU each way; %d NICs x %s Gb/s a node (%s GB/s a GPU); a step costs %s inside a node, %s between nodes\n",
		cfg.GPUs, num(cfg.NVLinkGBs), cfg.NICs, num(cfg.NICGbps), num(float64(cfg.NICs)*cfg.NICGbps/8/float64(cfg.GPUs)),
		seconds(cfg.NVLinkStep.Seconds()), seconds(cfg.NetStep.Seconds()))
	header := []string{"nodes", "ranks", "schedule", "NVLink / GPU", "NIC / GPU", "legs", "time", "algbw", "busbw", "busbw, legs overlapped"}
	for _, c := range cfg.Colls {
		for _, size := range cfg.Sizes {
			var rows [][]string
			var notes []string
			for _, n := range cfg.Nodes {
				sys.Nodes = n
				for _, sch := range cfg.Schedules {
					p, err := Predict(sys, c, sch, size)
					if err != nil {
						return err
					}
					rows = append(rows, row(p))
					if p.Note != "" && !contains(notes, p.Note) {
						notes = append(notes, p.Note)
					}
				}
			}
			fmt.Fprintf(w, "\n%s, %s (GB/s are 1e9 bytes a second)\n", c, sizeName(size))
			if cfg.Markdown {
				writeMarkdown(w, header, rows)
			} else if err := writeText(w, header, rows); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Fprintf(w, "\n%s\n", n)
			}
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func row(p Prediction) []string {
	legs := make([]string, len(p.Legs))
	for i, l := range p.Legs {
		legs[i] = l.Name + " " + seconds(l.Seconds())
	}
	joined := strings.Join(legs, " + ")
	if p.Concurrent && len(legs) > 1 {
		joined = strings.Join(legs, " / ") + ", at once"
	}
	over := "= busbw"
	if !p.Concurrent && len(p.Legs) > 1 {
		over = gbs(p.OverlappedBusBW())
	}
	return []string{
		strconv.Itoa(p.System.Nodes), strconv.Itoa(p.System.Ranks()), p.Schedule.Label(),
		bytesName(p.LinkBytes(NVLink)), bytesName(p.LinkBytes(NIC)), joined,
		seconds(p.Seconds()), gbs(p.AlgBW()), gbs(p.BusBW()), over,
	}
}

func writeMarkdown(w io.Writer, header []string, rows [][]string) {
	fmt.Fprintf(w, "\n| %s |\n|", strings.Join(header, " | "))
	for i := range header {
		if i == 2 || i == 5 {
			fmt.Fprint(w, "---|")
		} else {
			fmt.Fprint(w, "---:|")
		}
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

func writeText(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// num prints a rate without a needless fraction.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func gbs(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.2f ms", s*1e3)
	}
	return fmt.Sprintf("%.1f us", s*1e6)
}

func bytesName(b float64) string {
	switch {
	case b == 0:
		return "0"
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// sizeName spells a size as the flags do when it is a whole KiB, MiB or GiB.
func sizeName(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d B", n)
}

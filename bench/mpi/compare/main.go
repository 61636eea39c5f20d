// Command compare runs goccl's host backend and Open MPI's MPI_Allreduce
// side by side on this machine (float32 sum, sizes doubling, the median
// of each size's call-by-call times, the best of several rounds run
// alternately) and prints both times and goccl's as a multiple of MPI's.
// Run from the repository root:
//
//	go run ./bench/mpi/compare [-np 2] [-b 8] [-e 64M] [-n 200] [-rounds 3] [-alloc=false]
//
// goccl runs twice per round: on private buffers (staging) and, unless
// -alloc=false, on buffers from comm.AllocSlice (the direct path).
//
// It needs Open MPI's mpicc and mpirun (Debian: libopenmpi-dev,
// openmpi-bin) and builds goccl, gocclar and allreduce_mpi into a
// temporary directory.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/goccl/goccl/bench"
)

func main() {
	var o options
	flag.IntVar(&o.np, "np", 2, "ranks")
	minB := flag.String("b", "8", "smallest size (K/M suffixes)")
	maxB := flag.String("e", "64M", "largest size")
	flag.IntVar(&o.iters, "n", 200, "timed calls per size (the median is kept)")
	flag.IntVar(&o.warmup, "w", 20, "warm-up calls per size")
	flag.IntVar(&o.first, "W", 2000, "extra warm-up calls of the smallest size")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds, alternating the two; the best median of each size is kept")
	flag.BoolVar(&o.alloc, "alloc", true, "also time goccl on buffers from comm.AllocSlice")
	flag.Parse()
	var err error
	if o.minB, err = bench.ParseSize(*minB); err == nil {
		o.maxB, err = bench.ParseSize(*maxB)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	}
	if err := compare(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

type options struct {
	np, iters, warmup, first, rounds int
	minB, maxB                       int64
	alloc                            bool // also goccl on buffers from AllocSlice
}

// errNoMPI says Open MPI's tools are missing.
var errNoMPI = errors.New("mpicc and mpirun (Open MPI) are needed (Debian: apt-get install libopenmpi-dev openmpi-bin)")

// tools are the built programs.
type tools struct{ mpiProg, goccl, gocclar string }

func build(ctx context.Context, dir string) (tools, error) {
	for _, t := range []string{"mpicc", "mpirun"} {
		if _, err := exec.LookPath(t); err != nil {
			return tools{}, errNoMPI
		}
	}
	t := tools{mpiProg: filepath.Join(dir, "allreduce_mpi"), goccl: filepath.Join(dir, "goccl"), gocclar: filepath.Join(dir, "gocclar")}
	steps := [][]string{
		{"mpicc", "-O2", "-o", t.mpiProg, "-x", "c", "bench/mpi/allreduce_mpi.c"},
		{"go", "build", "-o", t.goccl, "./cmd/goccl"},
		{"go", "build", "-o", t.gocclar, "./bench/mpi/gocclar"},
	}
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return tools{}, fmt.Errorf("%s: %w\n%s", strings.Join(s, " "), err, out)
		}
	}
	return t, nil
}

// mpirunArgs: root needs --allow-run-as-root; --oversubscribe lets more
// ranks than cores start.
func mpirunArgs(np int) []string {
	a := []string{"--oversubscribe", "-np", strconv.Itoa(np)}
	if os.Geteuid() == 0 {
		a = append([]string{"--allow-run-as-root"}, a...)
	}
	return a
}

// times is one program's output: median microseconds by size, and the
// memcpy line where there is one.
type times struct {
	bySize       map[int64]float64
	memcpyBytes  int64
	memcpyMicros float64
}

func parse(r io.Reader) (times, error) {
	t := times{bySize: map[int64]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var err error
		switch {
		case len(f) == 3 && f[0] == "memcpy":
			if t.memcpyBytes, err = strconv.ParseInt(f[1], 10, 64); err == nil {
				t.memcpyMicros, err = strconv.ParseFloat(f[2], 64)
			}
		case len(f) == 2:
			var b int64
			var us float64
			if b, err = strconv.ParseInt(f[0], 10, 64); err == nil {
				us, err = strconv.ParseFloat(f[1], 64)
			}
			t.bySize[b] = us
		default:
			err = fmt.Errorf("unexpected line %q", sc.Text())
		}
		if err != nil {
			return t, err
		}
	}
	return t, sc.Err()
}

func runProg(ctx context.Context, name string, args ...string) (times, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return times{}, fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return parse(&out)
}

// best keeps the smaller time of each size.
func best(acc *times, t times) {
	if acc.bySize == nil {
		*acc = t
		return
	}
	for b, us := range t.bySize {
		if old, ok := acc.bySize[b]; !ok || us < old {
			acc.bySize[b] = us
		}
	}
	if t.memcpyMicros > 0 && (acc.memcpyMicros == 0 || t.memcpyMicros < acc.memcpyMicros) {
		acc.memcpyBytes, acc.memcpyMicros = t.memcpyBytes, t.memcpyMicros
	}
}

func compare(ctx context.Context, o options, w io.Writer) error {
	dir, err := os.MkdirTemp("", "goccl-mpi-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t, err := build(ctx, dir)
	if err != nil {
		return err
	}
	sizes := []string{strconv.FormatInt(o.minB, 10), strconv.FormatInt(o.maxB, 10), strconv.Itoa(o.iters), strconv.Itoa(o.warmup), strconv.Itoa(o.first)}
	var mpi, goc, shared times
	start, loadBefore := time.Now(), loadAverage()
	gocclar := []string{"run", "-np", strconv.Itoa(o.np), t.gocclar,
		"-b", sizes[0], "-e", sizes[1], "-n", sizes[2], "-w", sizes[3], "-W", sizes[4]}
	for r := 0; r < o.rounds; r++ {
		m, err := runProg(ctx, "mpirun", append(append(mpirunArgs(o.np), t.mpiProg), sizes...)...)
		if err != nil {
			return err
		}
		g, err := runProg(ctx, t.goccl, gocclar...)
		if err != nil {
			return err
		}
		best(&mpi, m)
		best(&goc, g)
		if o.alloc {
			s, err := runProg(ctx, t.goccl, append(gocclar, "-alloc")...)
			if err != nil {
				return err
			}
			best(&shared, s)
		}
	}
	if err := report(w, o, mpi, goc, shared, time.Since(start)); err != nil {
		return err
	}
	// Other work on the machine slows both programs, the small calls most.
	_, err = fmt.Fprintf(w, "# load average (1 min): %s at the start, %s at the end\n", loadBefore, loadAverage())
	return err
}

// loadAverage is the one-minute load average, as the kernel prints it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

// report prints the table; shared (goccl on buffers from AllocSlice) has
// its columns only where it has times.
func report(w io.Writer, o options, mpi, goc, shared times, took time.Duration) error {
	fmt.Fprintf(w, "# AllReduce float32 sum, %d ranks, median of %d calls per size, best of %d rounds (%.0f s)\n",
		o.np, o.iters, o.rounds, took.Seconds())
	withShared := len(shared.bySize) > 0
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	head := "bytes\tOpen MPI (us)\tgoccl (us)\tgoccl/MPI\t"
	if withShared {
		head += "goccl Alloc (us)\tAlloc/MPI\t"
	}
	fmt.Fprintln(tw, head)
	worst, worstShared := 0.0, 0.0
	for b := o.minB; b <= o.maxB; b *= 2 {
		m, okm := mpi.bySize[b]
		g, okg := goc.bySize[b]
		s, oks := shared.bySize[b]
		if !okm || !okg || (withShared && !oks) {
			return fmt.Errorf("size %d missing from a program's output", b)
		}
		ratio, ratioShared := math.Inf(1), math.Inf(1)
		if m > 0 {
			ratio, ratioShared = g/m, s/m
		}
		worst = max(worst, ratio)
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.2fx\t", b, m, g, ratio)
		if withShared {
			worstShared = max(worstShared, ratioShared)
			fmt.Fprintf(tw, "%.2f\t%.2fx\t", s, ratioShared)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "# worst goccl/MPI: %.2fx\n", worst)
	if withShared {
		fmt.Fprintf(w, "# worst goccl Alloc/MPI: %.2fx\n", worstShared)
	}
	// The yardstick is the faster of the programs' memcpys of the same
	// bytes (each times one on its own buffers).
	cp := goc
	if withShared && shared.memcpyMicros > 0 && (cp.memcpyMicros == 0 || shared.memcpyMicros < cp.memcpyMicros) {
		cp.memcpyBytes, cp.memcpyMicros = shared.memcpyBytes, shared.memcpyMicros
	}
	if cp.memcpyMicros > 0 {
		fmt.Fprintf(w, "# memcpy of %d bytes: %.2f us; goccl's AllReduce of it costs %.2f memcpys",
			cp.memcpyBytes, cp.memcpyMicros, goc.bySize[cp.memcpyBytes]/cp.memcpyMicros)
		if withShared {
			fmt.Fprintf(w, " on private buffers, %.2f on buffers from AllocSlice", shared.bySize[cp.memcpyBytes]/cp.memcpyMicros)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// Command conformance checks goccl's collectives as one rank of a job
// (started by goccl run, Open MPI's mpirun or torchrun) or as several
// in-process ranks (--inprocess): every collective x dtype x op x count x
// placement on fresh random inputs with poisoned outputs and guards,
// checked against package check's reference; the point-to-point calls
// (Send/Recv rings and all pairs, AllToAll(v), Gather, Scatter) likewise
// (p2p.go); optionally large messages,
// CUDA-graph replays and a back-to-back stress run. Each rank prints
// "conformance: rank R: N cases, F failed"; rank 0 adds the job's total.
// It exits 1 when any rank saw a wrong result or an error, 2 on a usage
// error.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/bench/job"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n\n%s", err, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	j, err := job.Open(ctx, job.Options{Backend: cfg.backend, InProcess: cfg.inprocess, InProcessFlag: "--inprocess"})
	if err != nil {
		fmt.Fprintf(stderr, "conformance: %v\n", err)
		return 1
	}
	code := runRanks(ctx, cfg, j.Ranks, &syncWriter{w: stdout}, stderr, j.Abort)
	if err := j.Close(); err != nil && code == 0 {
		fmt.Fprintf(stderr, "conformance: close: %v\n", err)
		code = 1
	}
	return code
}

// runRanks runs every rank of this process concurrently and returns the
// exit status: 0 only when every rank of the job passed.
func runRanks(ctx context.Context, cfg *config, ranks []bench.Rank, out *syncWriter, stderr io.Writer, abort func(error)) int {
	codes := make([]int, len(ranks))
	var wg sync.WaitGroup
	for i, rk := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = runRank(ctx, cfg, rk, out, stderr, abort)
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != 0 {
			return c
		}
	}
	return 0
}

func runRank(ctx context.Context, cfg *config, rk bench.Rank, out *syncWriter, stderr io.Writer, abort func(error)) int {
	r := newRankRunner(cfg, rk, out)
	if err := r.runAll(ctx); err != nil {
		fmt.Fprintf(stderr, "conformance: rank %d: error: %v\n", r.me, err)
		out.printf("conformance: rank %d: %d cases, %d failed, stopped by an error\n", r.me, r.cases, r.failed)
		if abort != nil && !errors.Is(err, errUsage) {
			abort(err) // peers must not wait for this rank
		}
		return 1
	}
	out.printf("conformance: rank %d: %d cases, %d failed\n", r.me, r.cases, r.failed)
	// Agree on the verdict, so that every process exits alike.
	var msg [16]byte
	binary.LittleEndian.PutUint64(msg[:], uint64(r.cases))
	binary.LittleEndian.PutUint64(msg[8:], uint64(r.failed))
	all, err := rk.Comm.Bootstrap().AllGather(ctx, msg[:])
	if err != nil {
		fmt.Fprintf(stderr, "conformance: rank %d: gather results: %v\n", r.me, err)
		return 1
	}
	var cases, failed uint64
	for _, m := range all {
		if len(m) == 16 {
			cases += binary.LittleEndian.Uint64(m)
			failed += binary.LittleEndian.Uint64(m[8:])
		}
	}
	if r.me == 0 {
		out.printf("conformance: all %d ranks: %d cases, %d failed\n", len(all), cases, failed)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func (r *rankRunner) runAll(ctx context.Context) error {
	cases, err := buildCases(r.cfg, r.n)
	if err != nil {
		return err
	}
	if err := r.allocate(ctx, cases); err != nil {
		return err
	}
	err = r.runCases(ctx, cases)
	if err == nil {
		err = r.runP2P(ctx)
	}
	if e := r.free(ctx); err == nil {
		err = e
	}
	if err != nil {
		return err
	}
	if r.cfg.graph > 0 {
		if err := r.runGraph(ctx); err != nil {
			return err
		}
	}
	if r.cfg.stress > 0 {
		if err := r.runStress(ctx); err != nil {
			return err
		}
	}
	return nil
}

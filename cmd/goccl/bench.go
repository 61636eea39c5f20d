package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/goccl/goccl/bench"
	"github.com/goccl/goccl/bench/job"
)

// benchMain is `goccl bench`: see bench.Usage. It exits 0 when every
// check passed, 1 on wrong results or any failure, 2 on a usage error.
func benchMain(args []string) int {
	cfg, code, ok := benchArgs(args, os.Stdout, os.Stderr)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	inProcess := 0
	if cfg.GPUs > 1 {
		inProcess = cfg.GPUs
	}
	j, err := job.Open(ctx, job.Options{Backend: string(cfg.Backend), InProcess: inProcess, InProcessFlag: "-g"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "goccl bench: %s\n", benchMsg(err))
		return 1
	}
	if err := cfg.CheckBackend(bench.Backend(j.Backend)); err != nil {
		// Every rank finds the same, so none waits for another.
		_ = j.Close()
		fmt.Fprintf(os.Stderr, "goccl bench: %s\n", benchMsg(err))
		return 2
	}
	sum, runErr := bench.Run(ctx, &cfg, j.Ranks, os.Stdout)
	if runErr != nil && !errors.Is(runErr, bench.ErrWrong) {
		j.Abort(runErr)
	}
	code = 0
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "goccl bench: %s\n", benchMsg(runErr))
		code = 1
	}
	if leads(j) && (runErr == nil || errors.Is(runErr, bench.ErrWrong)) {
		if err := writeOutputs(&cfg, sum); err != nil {
			fmt.Fprintf(os.Stderr, "goccl bench: %s\n", benchMsg(err))
			code = 1
		}
	}
	if err := j.Close(); err != nil && runErr == nil {
		fmt.Fprintf(os.Stderr, "goccl bench: close: %s\n", benchMsg(err))
		code = 1
	}
	return code
}

// benchArgs parses goccl bench's command line; when that ends the command
// it returns false and the exit code: 0 for -h (the usage on stdout), 2
// for a bad command line (the error and the usage on stderr).
func benchArgs(args []string, stdout, stderr io.Writer) (bench.Config, int, bool) {
	cfg, err := bench.ParseArgs(args)
	if err == nil {
		return cfg, 0, true
	}
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			fmt.Fprint(stdout, bench.Usage)
			return cfg, 0, false
		}
	}
	fmt.Fprintf(stderr, "goccl bench: %s\n%s", benchMsg(err), bench.Usage)
	return cfg, 2, false
}

// benchMsg is err's text without the prefixes the command's
// "goccl bench: " already says: the bench package's "bench: " (and its
// usage sentinel's "bench: usage: "), and the library's "goccl: ".
func benchMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), bench.ErrUsage.Error()+": ")
	s = strings.TrimPrefix(s, "bench: ")
	return strings.ReplaceAll(s, "goccl: ", "")
}

// leads reports whether this process holds rank 0, the one that reports.
func leads(j *job.Job) bool {
	for _, r := range j.Ranks {
		if r.Comm.Rank() == 0 {
			return true
		}
	}
	return false
}

func writeOutputs(cfg *bench.Config, sum bench.Summary) error {
	rep := bench.NewReport(cfg, sum)
	if cfg.JSON != "" {
		if err := rep.WriteJSON(cfg.JSON); err != nil {
			return err
		}
	}
	if cfg.Plot == "" {
		return nil
	}
	reports := []bench.Report{rep}
	if cfg.Peer != "" {
		peer, err := bench.ReadReport(cfg.Peer)
		if err != nil {
			return err
		}
		reports = append(reports, peer)
	}
	return bench.WritePlot(cfg.Plot, reports...)
}

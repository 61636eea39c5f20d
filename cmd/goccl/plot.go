package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goccl/goccl/bench"
)

// plotMain draws busbw against size from saved --json reports (goccl's, or
// NCCL's from bench/nccl), the first solid and the others dashed: the
// same plot as `goccl bench --plot`, for runs made elsewhere, such as the
// GPU machine's perf.sh.
func plotMain(args []string) int {
	return plotCmd(args, os.Stderr)
}

func plotCmd(args []string, stderr io.Writer) int {
	fs := subcommandFlags("plot", "usage: goccl plot -o FILE.png RUN.json [PEER.json...]", stderr)
	out := fs.String("o", "", "the plot to write (.png, .svg or .pdf)")
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if *out == "" || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	reports := make([]bench.Report, 0, fs.NArg())
	for _, path := range fs.Args() {
		r, err := bench.ReadReport(path)
		if err != nil {
			fmt.Fprintf(stderr, "goccl plot: %v\n", err)
			return 1
		}
		if len(reports) > 0 && r.Collective != reports[0].Collective {
			fmt.Fprintf(stderr, "goccl plot: %s is %s, %s is %s: one collective per plot\n",
				fs.Arg(0), reports[0].Collective, path, r.Collective)
			return 1
		}
		reports = append(reports, r)
	}
	if err := bench.WritePlot(*out, reports...); err != nil {
		fmt.Fprintf(stderr, "goccl plot: %v\n", err)
		return 1
	}
	return 0
}

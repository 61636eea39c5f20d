package main

import (
	"io"
	"os"

	"github.com/goccl/goccl/bench"
)

// plotMain draws busbw against size from saved --json reports (goccl's, or
// NCCL's from bench/nccl), the first solid and the others dashed: the
// same plot as `goccl bench --plot`, for runs made elsewhere, such as the
// GPU machine's perf.sh.
func plotMain(args []string) int {
	return plotCmd(args, os.Stdout, os.Stderr)
}

func plotCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("plot", "goccl plot -o FILE.png RUN.json [PEER.json...]",
		`Draws busbw against size from reports saved with goccl bench --json (or
NCCL's, from bench/nccl): the first run solid, the others dashed. One
collective per plot.`, stdout, stderr)
	out := fs.String("o", "", "write the plot to `FILE` (.png, .svg or .pdf)")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if *out == "" {
		return fs.usageError("name the plot to write with -o FILE")
	}
	if fs.NArg() == 0 {
		return fs.usageError("name at least one RUN.json")
	}
	reports := make([]bench.Report, 0, fs.NArg())
	for _, path := range fs.Args() {
		r, err := bench.ReadReport(path)
		if err != nil {
			return fs.fail("%s", benchMsg(err))
		}
		if len(reports) > 0 && r.Collective != reports[0].Collective {
			return fs.fail("%s is %s, %s is %s: one collective per plot",
				fs.Arg(0), reports[0].Collective, path, r.Collective)
		}
		reports = append(reports, r)
	}
	if err := bench.WritePlot(*out, reports...); err != nil {
		return fs.fail("%s", benchMsg(err))
	}
	return 0
}

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/goccl/goccl/recorder"
)

// traceMain turns flight records (the JSON files ranks write to
// GOCCL_RECORDER_DIR) into a Chrome trace that Perfetto and
// chrome://tracing open, and optionally a PNG timeline.
func traceMain(args []string) int { return traceCmd(args, os.Stdout, os.Stderr) }

func traceCmd(args []string, stdout, stderr io.Writer) int {
	fs := subcommandFlags("trace", "usage: goccl trace [-o trace.json] [-png timeline.png] RECORD.json...", stderr)
	out := fs.String("o", "", "the trace to write (default: standard output)")
	png := fs.String("png", "", "also draw a timeline (.png, .svg or .pdf)")
	// Flags may follow the files (goccl trace rank*.json -o trace.json).
	var files []string
	for rest := args; ; {
		if code, ok := parseFlags(fs, rest); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(files) == 0 {
		fs.Usage()
		return 2
	}
	recs := make([]*recorder.Record, 0, len(files))
	for _, f := range files {
		r, err := recorder.ReadFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "goccl trace: %v\n", err)
			return 1
		}
		recs = append(recs, r)
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "goccl trace: %v\n", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	if err := recorder.WriteChromeTrace(w, recs); err != nil {
		fmt.Fprintf(stderr, "goccl trace: %v\n", err)
		return 1
	}
	if *png != "" {
		if err := recorder.WriteTimeline(*png, recs); err != nil {
			fmt.Fprintf(stderr, "goccl trace: %v\n", err)
			return 1
		}
	}
	return 0
}

package main

import (
	"io"
	"os"
	"strings"

	"github.com/goccl/goccl/recorder"
)

// traceMain turns flight records (the JSON files ranks write to
// GOCCL_RECORDER_DIR) into a Chrome trace that Perfetto and
// chrome://tracing open, and optionally a PNG timeline.
func traceMain(args []string) int { return traceCmd(args, os.Stdout, os.Stderr) }

func traceCmd(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("trace", "goccl trace [-o trace.json] [-png timeline.png] RECORD.json...",
		`Turns flight records (the rank*.json files ranks write to
GOCCL_RECORDER_DIR, or what goccl dump prints) into Chrome's trace event
format, which Perfetto and chrome://tracing open: a process per rank, a
thread per stream, a slice per call. Flags may follow the files.`, stdout, stderr)
	out := fs.String("o", "", "write the trace to `FILE` (default: standard output)")
	png := fs.String("png", "", "also draw a timeline into `FILE` (.png, .svg or .pdf)")
	// Flags may follow the files (goccl trace rank*.json -o trace.json).
	var files []string
	for rest := args; ; {
		if code, ok := fs.parse(rest); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(files) == 0 {
		return fs.usageError("name at least one RECORD.json")
	}
	recs := make([]*recorder.Record, 0, len(files))
	for _, f := range files {
		// A file may hold several records: goccl dump's output for a
		// process of several communicators.
		rs, err := recorder.ReadRecords(f)
		if err != nil {
			return fs.fail("%s", recorderMsg(err))
		}
		recs = append(recs, rs...)
	}
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fs.fail("%v", err)
		}
		defer f.Close()
		w = f
	}
	if err := recorder.WriteChromeTrace(w, recs); err != nil {
		return fs.fail("%s", recorderMsg(err))
	}
	if *png != "" {
		if err := recorder.WriteTimeline(*png, recs); err != nil {
			return fs.fail("%s", recorderMsg(err))
		}
	}
	return 0
}

// recorderMsg is err's text without the recorder package's own
// "recorder: " prefix, which the command's prefix replaces.
func recorderMsg(err error) string { return strings.TrimPrefix(err.Error(), "recorder: ") }

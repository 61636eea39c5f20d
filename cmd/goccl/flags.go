package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// subcommandFlags is the flag set of `goccl name`: its errors and its
// one-line usage go to stderr.
func subcommandFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("goccl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, usage) }
	return fs
}

// parseFlags parses args into fs; when that ends the command it returns
// false and the exit code: 0 for -h, 2 for a bad flag.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	return 0, true
}

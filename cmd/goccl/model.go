package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/goccl/goccl/internode/costmodel"
)

// modelMain is `goccl model`: the cost model's tables (see
// costmodel.Usage). It runs nothing; it exits 2 on a usage error.
func modelMain(args []string) int { return modelCmd(args, os.Stdout, os.Stderr) }

func modelCmd(args []string, stdout, stderr io.Writer) int {
	cfg, err := costmodel.ParseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, costmodel.Usage)
		return 0 // as `goccl run -h` and `goccl info -h`
	}
	if err != nil {
		fmt.Fprintf(stderr, "goccl model: %s\n%s", modelMsg(err), costmodel.Usage)
		return 2
	}
	if err := costmodel.Write(stdout, cfg); err != nil {
		fmt.Fprintf(stderr, "goccl model: %s\n", modelMsg(err))
		return 1
	}
	return 0
}

// modelMsg is err's text without the sentinel's own "costmodel: invalid
// argument: ", which the command's "goccl model: " replaces.
func modelMsg(err error) string {
	return strings.Replace(err.Error(), costmodel.ErrInvalid.Error()+": ", "", 1)
}

package main

import (
	"os"

	"github.com/goccl/goccl/launcher"
)

// runMain is `goccl run`; the launcher package does the work so that tests
// drive the same code in-process.
func runMain(args []string) int {
	return launcher.Main(args, os.Stdout, os.Stderr)
}

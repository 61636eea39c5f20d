package main

import (
	"fmt"
	"os"
)

// runMain is filled in by its owner.
func runMain(args []string) int {
	fmt.Fprintln(os.Stderr, "goccl run: not built yet")
	return 1
}

package main

import (
	"fmt"
	"os"
)

// infoMain is filled in by its owner.
func infoMain(args []string) int {
	fmt.Fprintln(os.Stderr, "goccl info: not built yet")
	return 1
}

package main

import (
	"fmt"
	"os"
)

// benchMain is filled in by its owner.
func benchMain(args []string) int {
	fmt.Fprintln(os.Stderr, "goccl bench: not built yet")
	return 1
}

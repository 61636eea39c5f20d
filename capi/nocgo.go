//go:build !cgo

package main

import (
	"fmt"
	"os"
)

// The C API is a c-shared library, which only a build with cgo can make.
// Without cgo the package is this program, so that `go build ./...` and
// `go vet ./...` still cover the module; it says how to build the library.
func main() {
	fmt.Fprintln(os.Stderr, "capi: goccl's NCCL C API (libnccl.so.2) is a c-shared library and needs cgo: build it with `make libnccl` (CGO_ENABLED=1 and gcc)")
	os.Exit(2)
}

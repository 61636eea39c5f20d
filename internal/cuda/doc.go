// Package cuda binds the CUDA driver API by loading libcuda.so.1 at run
// time (dlopen plus an explicit symbol table), so goccl builds with gcc
// alone and runs, with a clear error, where no driver exists. Built
// without cgo (CGO_ENABLED=0), Load fails with ErrNoDriver saying so
// (load_nocgo.go).
package cuda

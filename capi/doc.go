// Command capi is goccl's NCCL C API: built with -buildmode=c-shared it is
// libnccl.so.2 (make libnccl), which programs written for NCCL link or
// LD_PRELOAD to run on goccl unmodified. shim.c holds the C entry points
// with NCCL's signatures; the Go side here keeps the communicators,
// groups and registrations, and maps goccl's errors to NCCL's codes.
//
// A c-shared library needs cgo: built without it (CGO_ENABLED=0) the
// package is a program that says so (nocgo.go).
//
// A process holds one Go runtime, so the library is for programs that are
// not Go programs; Go programs import goccl's packages.
package main

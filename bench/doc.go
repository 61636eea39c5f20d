// Package bench is `goccl bench`: nccl-tests' method, flags and output for
// goccl's collectives on either backend. Each process runs one or more
// ranks (one goroutine each); every rank times its calls, rank 0 gathers
// the times through the communicator's bootstrap and prints nccl-tests'
// header, rows and footer, and optionally writes JSON and a busbw plot.
//
// The communicator is reached through the small Comm interface so that
// the package is tested with an in-process fake; cmd/goccl adapts
// comm.Comm to it.
package bench

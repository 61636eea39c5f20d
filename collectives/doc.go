// Package collectives defines the collective operations, their datatypes
// and reduction ops, argument validation, and the Backend interface. The
// host backend (collectives/host) and the GPU backend (collectives/gpu)
// implement Backend.
package collectives

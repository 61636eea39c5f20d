// Package cudatest provides Fake, an in-memory cuda.Driver for tests of
// code that maps memory between ranks (transports) on machines without a
// GPU. Each rank is identified by its context: rank r uses device r and
// context Ctx(r), and ranks with different contexts behave as separate
// processes (an IPC handle cannot be opened by its own context, imports get
// fresh addresses). Fake keeps the objects it hands out, checks the rules
// CUDA enforces, logs every call, and records ordering violations such as
// an exporter freeing memory a peer still has open.
package cudatest

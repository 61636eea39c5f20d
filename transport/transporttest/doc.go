// Package transporttest provides an in-process transport.Bootstrap for
// tests: N ranks in one process, each a goroutine, exchanging data through
// shared state and file descriptors through dup(2).
package transporttest

// Package pairtest runs a test across two processes: the test binary
// re-executes itself as rank 1, and the two ranks talk through a
// transport.Bootstrap over a SOCK_SEQPACKET socket pair (messages keep
// their boundaries; descriptors travel with SCM_RIGHTS). It lets the shm
// transport and the host backend be tested across real processes without
// the comm package. For tests only.
package pairtest

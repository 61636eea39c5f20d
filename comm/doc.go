// Package comm creates and tears down communicators: the unique id, the
// TCP bootstrap and its rendezvous, the launchers' environment contracts
// (GOCCL_COMM_ID, torchrun, Open MPI, PMI, Slurm), the Unix sockets that
// pass file descriptors between the ranks of a node, and the Comm type
// through which users call collectives. It sits above collectives/ and
// transport/, and implements transport.Bootstrap for them.
package comm

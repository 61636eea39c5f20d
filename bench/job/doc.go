// Package job starts the communicators a goccl tool process drives and
// pairs each with its buffer space: one rank from the launcher's
// environment (goccl run, torchrun, mpirun, srun), or several ranks in one
// process (InitAll; UVA on GPUs). It adapts comm.Comm to bench.Comm for
// `goccl bench` and the conformance program.
package job

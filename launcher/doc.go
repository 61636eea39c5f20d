// Package launcher starts the ranks of a local job, mpirun-style: it is
// what `goccl run -np N prog args…` does, and tests call Run in-process.
//
// Each rank gets the parent's environment plus the contract that comm's
// InitFromEnv reads: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE (torchrun's names), GOCCL_COMM_ID
// (host:port of rank 0's bootstrap) and GOCCL_JOB_TOKEN (random, names the
// job's Unix sockets). Identity variables of other launchers (Open MPI,
// PMI, Slurm) are removed so that a rank never sees two identities.
//
// The launcher forwards SIGINT, SIGTERM and SIGHUP to every rank, tags
// output lines with the rank when asked, and when a rank fails (or the
// timeout passes, or the context ends) it stops the others: SIGTERM, then
// SIGKILL after a grace period (after a forwarded signal, the ranks get the
// grace period to end on that signal before SIGKILL). Each rank runs in its own process group
// (signals reach its children too, and a terminal's Ctrl-C reaches the
// ranks once, through the launcher) and with a parent-death signal of
// SIGKILL, so a launcher killed outright leaves no rank behind.
package launcher

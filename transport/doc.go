// Package transport declares what every transport needs from the
// bootstrap (Bootstrap) and what each offers (Mapper, Region). The
// sub-packages are the four ways of reaching a peer's GPU memory (uva, ipc,
// vmm, nvls) plus shm, host memory shared between processes.
package transport

// Package membuf gives the benchmark and the conformance program one way
// to handle collective buffers whatever the backend: host memory (mmap'd,
// outside the Go heap, so its address can cross the API as a uintptr) or
// device memory through the CUDA driver, with the copies, poison fills,
// timers and graph capture they need.
package membuf

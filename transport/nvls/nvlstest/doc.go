// Package nvlstest is a fake for tests: one node's NVSwitch multicast
// (NVLS) driver state, shared by every rank's Driver. It simulates the
// multicast objects, memory handles, address reservations, mappings and
// bindings that transport/nvls.Setup and the GPU backend's NVLS path use,
// enforces the ordering rules the real driver has (every device added
// before a bind, nothing released while bound or mapped), and counts every
// Multicast* call so that a test can show there were none. It never talks
// to a GPU.
package nvlstest

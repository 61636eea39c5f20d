// Package nvml binds the NVIDIA Management Library by loading
// libnvidia-ml.so.1 at run time: NVLink state, remote endpoints, P2P status
// and fabric information that the CUDA driver does not report. Built
// without cgo, Open fails with ErrNoLibrary saying so.
package nvml

package comm

import "github.com/goccl/goccl/internal/cuda"

// probeGPUs counts CUDA devices. It is consulted only when the backend is
// auto or gpu, so host-only jobs never load the driver; tests replace it.
var probeGPUs = func() (int, error) {
	d, err := cuda.Load()
	if err != nil {
		return 0, err
	}
	return d.DeviceCount()
}

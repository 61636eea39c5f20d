package topology

import (
	"context"
	"fmt"
	"sync"

	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/nvml"
)

// systemSource is the machine this process runs on: libcuda.so.1,
// libnvidia-ml.so.1 and /sys. This file is the only one that touches the
// real libraries.
type systemSource struct {
	nvmlOnce sync.Once
	lib      nvml.Lib
	libErr   error
}

func (s *systemSource) CUDA() (cuda.Driver, error) { return cuda.Load() }

func (s *systemSource) NVML() (nvml.Lib, error) {
	s.nvmlOnce.Do(func() {
		lib, err := nvml.Open()
		if err != nil {
			s.libErr = err
			return
		}
		if err := lib.Init(); err != nil {
			s.libErr = fmt.Errorf("nvmlInit: %w", err)
			return
		}
		s.lib = lib
	})
	return s.lib, s.libErr
}

func (s *systemSource) SysfsRoot() string { return "/sys" }
func (s *systemSource) CPU() CPU          { return HostCPU() }

func (s *systemSource) close() {
	if s.lib != nil {
		_ = s.lib.Shutdown() // nvmlShutdown is reference counted; nothing to do on failure
	}
}

// ProbeSystem probes this machine. No GPU (no driver, no device) gives
// facts without GPUs and a NoGPUReason, not an error.
func ProbeSystem(ctx context.Context) (*Facts, error) {
	src := &systemSource{}
	defer src.close()
	return Probe(ctx, src)
}

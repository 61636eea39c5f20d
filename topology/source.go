package topology

import (
	"github.com/goccl/goccl/internal/cuda"
	"github.com/goccl/goccl/internal/nvml"
)

// Source is where Probe learns the facts. The real one (SystemSource)
// loads libcuda and libnvidia-ml and reads /sys; tests hand in fakes
// (see topology/topotest).
type Source interface {
	// CUDA returns the driver, or an error (wrapping cuda.ErrNoDriver where
	// there is none) that Probe turns into Facts.NoGPUReason.
	CUDA() (cuda.Driver, error)
	// NVML returns the management library, initialized; an error makes
	// Probe carry on without NVLink or PCIe path facts, with a warning.
	NVML() (nvml.Lib, error)
	// SysfsRoot is where sysfs is mounted: "/sys", or a test's directory.
	SysfsRoot() string
	// CPU describes the host processor.
	CPU() CPU
}

// StaticSource is a Source from fixed parts.
type StaticSource struct {
	Driver    cuda.Driver
	DriverErr error
	Lib       nvml.Lib
	LibErr    error
	Sysfs     string
	HostCPU   CPU
}

// CUDA gives Driver and DriverErr.
func (s StaticSource) CUDA() (cuda.Driver, error) { return s.Driver, s.DriverErr }

// NVML gives Lib and LibErr.
func (s StaticSource) NVML() (nvml.Lib, error) { return s.Lib, s.LibErr }

// SysfsRoot gives Sysfs.
func (s StaticSource) SysfsRoot() string { return s.Sysfs }

// CPU gives HostCPU.
func (s StaticSource) CPU() CPU { return s.HostCPU }

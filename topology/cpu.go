package topology

import (
	"runtime"

	"github.com/klauspost/cpuid/v2"
)

// cpuFeatures are the CPU features worth reporting for a collective
// library: the vector widths the host backend's reductions can use and the
// conversions for half types.
var cpuFeatures = []struct {
	id   cpuid.FeatureID
	name string
}{
	{cpuid.SSE42, "SSE4.2"},
	{cpuid.AVX, "AVX"},
	{cpuid.AVX2, "AVX2"},
	{cpuid.FMA3, "FMA3"},
	{cpuid.F16C, "F16C"},
	{cpuid.AVX512F, "AVX512F"},
	{cpuid.AVX512BW, "AVX512BW"},
	{cpuid.AVX512VL, "AVX512VL"},
	{cpuid.AVX512BF16, "AVX512_BF16"},
	{cpuid.AVX512FP16, "AVX512_FP16"},
	{cpuid.AMXBF16, "AMX_BF16"},
	{cpuid.ASIMD, "ASIMD"},
	{cpuid.SVE, "SVE"},
}

// HostCPU describes the processor this process runs on.
func HostCPU() CPU {
	c := cpuid.CPU
	out := CPU{
		Vendor:        c.VendorString,
		Brand:         c.BrandName,
		Family:        c.Family,
		Model:         c.Model,
		Features:      []string{},
		PhysicalCores: c.PhysicalCores,
		LogicalCores:  c.LogicalCores,
	}
	if out.LogicalCores == 0 {
		out.LogicalCores = runtime.NumCPU()
	}
	for _, f := range cpuFeatures {
		if c.Supports(f.id) {
			out.Features = append(out.Features, f.name)
		}
	}
	return out
}

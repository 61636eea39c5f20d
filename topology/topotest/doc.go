// Package topotest provides fake machines for tests: a CUDA driver and an
// NVML library answering as a given node would (HGX H100 behind NVSwitch,
// 2x H200 joined by NVLink, PCIe-only boxes, mixed boxes, no GPU), and the
// sysfs files topology reads, written under a test's directory.
package topotest

// Package kernels holds goccl's CUDA C++ sources, the committed fatbin
// built from them with its manifest, and the loader that hands the fatbin
// to cuModuleLoadData on each device.
package kernels

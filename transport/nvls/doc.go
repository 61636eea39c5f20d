// Package nvls builds NVSwitch multicast objects (NVLS) over VMM memory.
// It is used only when GOCCL_NVLS_ENABLE=1 and no disabling variable is
// set; see DESIGN §8.
package nvls

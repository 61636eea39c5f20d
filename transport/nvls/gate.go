package nvls

// Gate reports whether NVLS may be used, and if not why, from the process
// environment (getenv is os.Getenv in production). NVLS needs an explicit
// opt-in and yields to every other library's opt-out (DESIGN §8).
func Gate(getenv func(string) string) (ok bool, why string) {
	switch {
	case getenv("GOCCL_NVLS_ENABLE") != "1":
		return false, "GOCCL_NVLS_ENABLE is not 1"
	case getenv("NCCL_NVLS_ENABLE") == "0":
		return false, "NCCL_NVLS_ENABLE=0"
	case getenv("TORCH_SYMM_MEM_DISABLE_MULTICAST") == "1":
		return false, "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"
	case getenv("NVSHMEM_DISABLE_NVLS") == "1":
		return false, "NVSHMEM_DISABLE_NVLS=1"
	}
	return true, ""
}

package topology

import (
	"fmt"
	"strings"
)

// NormalizeBusID writes a PCI address the way sysfs names devices:
// lower case, four-digit domain ("0000:18:00.0"). CUDA writes
// "0000:18:00.0", NVML "00000000:18:00.0", both in upper case.
func NormalizeBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(rest, ":") {
		return s // no domain: leave as given
	}
	var d uint64
	if _, err := fmt.Sscanf(dom, "%x", &d); err != nil {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// formatUUID writes a CUDA device UUID as nvidia-smi does.
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Package units reads the byte sizes that goccl's flags and environment
// variables take, in nccl-tests' spelling ("8", "64K", "1.5M", "2G").
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize reads a size: a number with an optional K, M or G
// suffix (powers of 1024), fractions allowed ("1.5M").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult, t = 1<<10, t[:n-1]
		case 'm', 'M':
			mult, t = 1<<20, t[:n-1]
		case 'g', 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	// !(v >= 0) also rejects NaN, which int64() would turn into MinInt64.
	if err != nil || !(v >= 0) || v*mult > 1<<50 {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	return int64(v * mult), nil
}

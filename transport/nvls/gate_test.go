package nvls

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// gateVars are the four variables of DESIGN §8.
var gateVars = []string{"GOCCL_NVLS_ENABLE", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}

// TestGateEveryCombination sets each of the four variables to unset, "0"
// or "1" (81 environments) and checks Gate against the rule written out
// independently: open only with the opt-in and without any opt-out, and
// when closed the reason names a variable whose value closes it.
func TestGateEveryCombination(t *testing.T) {
	values := []string{"", "0", "1"}
	for i := 0; i < 81; i++ {
		env := map[string]string{}
		k := i
		for _, v := range gateVars {
			if val := values[k%3]; val != "" {
				env[v] = val
			}
			k /= 3
		}
		t.Run(fmt.Sprint(env), func(t *testing.T) {
			closers := []string{}
			if env["GOCCL_NVLS_ENABLE"] != "1" {
				closers = append(closers, "GOCCL_NVLS_ENABLE")
			}
			if env["NCCL_NVLS_ENABLE"] == "0" {
				closers = append(closers, "NCCL_NVLS_ENABLE")
			}
			if env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" {
				closers = append(closers, "TORCH_SYMM_MEM_DISABLE_MULTICAST")
			}
			if env["NVSHMEM_DISABLE_NVLS"] == "1" {
				closers = append(closers, "NVSHMEM_DISABLE_NVLS")
			}
			ok, why := Gate(func(k string) string { return env[k] })
			assert.Equal(t, len(closers) == 0, ok)
			if ok {
				assert.Empty(t, why)
				return
			}
			named := false
			for _, c := range closers {
				if why != "" && containsWord(why, c) {
					named = true
				}
			}
			assert.True(t, named, "reason %q names none of %v", why, closers)
		})
	}
}

func TestGateCases(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		ok   bool
	}{
		{"nothing set", nil, false},
		{"opt-in only", map[string]string{"GOCCL_NVLS_ENABLE": "1"}, true},
		{"opt-in must be exactly 1", map[string]string{"GOCCL_NVLS_ENABLE": "true"}, false},
		{"opt-in with spaces", map[string]string{"GOCCL_NVLS_ENABLE": " 1"}, false},
		{"opt-outs set, opt-in set", map[string]string{"GOCCL_NVLS_ENABLE": "1", "NCCL_NVLS_ENABLE": "0",
			"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}, false},
		{"opt-outs set, no opt-in", map[string]string{"NCCL_NVLS_ENABLE": "0",
			"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}, false},
		{"NCCL enabled explicitly", map[string]string{"GOCCL_NVLS_ENABLE": "1", "NCCL_NVLS_ENABLE": "1"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, why := Gate(func(k string) string { return c.env[k] })
			assert.Equal(t, c.ok, ok, why)
			assert.Equal(t, !c.ok, why != "")
		})
	}
}

func containsWord(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i:i+len(w)] == w {
			end := i + len(w)
			if end == len(s) || !(s[end] == '_' || s[end] >= 'A' && s[end] <= 'Z') {
				return true
			}
		}
	}
	return false
}

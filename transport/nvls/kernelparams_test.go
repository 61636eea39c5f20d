package nvls

import (
	"encoding/binary"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKernelParamsMatchSource reads the Params struct of kernels/nvls.cu
// (its "// offset:" comments) and the kernel limits, and checks that Put
// writes each field at the offset the kernel reads it from.
func TestKernelParamsMatchSource(t *testing.T) {
	src, err := os.ReadFile("../../kernels/nvls.cu")
	require.NoError(t, err)
	text := string(src)

	start := strings.Index(text, "struct Params {")
	require.GreaterOrEqual(t, start, 0)
	end := strings.Index(text[start:], "};")
	body := text[start : start+end+40]
	field := regexp.MustCompile(`(?m)^\s*(u64|i32|u32)\s+(\w+);\s*//\s*(\d+)\b`)
	offsets := map[string]int{}
	for _, m := range field.FindAllStringSubmatch(body, -1) {
		off, _ := strconv.Atoi(m[3])
		offsets[m[2]] = off
	}
	size := regexp.MustCompile(`\};\s*//\s*(\d+) bytes`).FindStringSubmatch(body)
	require.NotNil(t, size, "size comment")
	assert.Equal(t, strconv.Itoa(KernelParamsSize), size[1])
	for name, want := range map[string]string{"kThreads": strconv.Itoa(KernelThreads), "kMaxBlocks": strconv.Itoa(KernelMaxBlocks)} {
		m := regexp.MustCompile(`constexpr int ` + name + ` = (\d+);`).FindStringSubmatch(text)
		require.NotNil(t, m, name)
		assert.Equal(t, want, m[1], name)
	}

	p := KernelParams{MC: 1, Src: 2, Dst: 3, Bytes: 4, Stride: 5, MCFlags: 6, UCFlags: 7, Epochs: 8, AbortFlag: 9, Rank: 10, NRanks: 11, Root: 12}
	b := make([]byte, KernelParamsSize)
	for i := range b {
		b[i] = 0xee
	}
	p.Put(b)
	want64 := map[string]uint64{"mc": 1, "src": 2, "dst": 3, "bytes": 4, "stride": 5, "mcFlags": 6, "ucFlags": 7, "epochs": 8, "abortFlag": 9}
	want32 := map[string]uint32{"rank": 10, "nranks": 11, "root": 12, "pad": 0}
	require.Len(t, offsets, len(want64)+len(want32), "fields parsed from the source: %v", offsets)
	for name, v := range want64 {
		off, ok := offsets[name]
		require.True(t, ok, name)
		assert.Equal(t, v, binary.LittleEndian.Uint64(b[off:]), name)
	}
	for name, v := range want32 {
		off, ok := offsets[name]
		require.True(t, ok, name)
		assert.Equal(t, v, binary.LittleEndian.Uint32(b[off:]), name)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { p.Put(b) }), "Put allocates")
}

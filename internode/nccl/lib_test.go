//go:build cgo

package nccl

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// buildFake compiles testdata/fakenccl.c into dir/name with the given
// version and, when goccl is set, goccl's error text.
func buildFake(t *testing.T, dir, name string, version int, goccl bool, defines ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build the stand-in libnccl.so.2")
	}
	out := filepath.Join(dir, name)
	args := []string{"-shared", "-fPIC", "-O0", "-o", out, "testdata/fakenccl.c", "-DFAKE_VERSION=" + itoa(version)}
	if goccl {
		args = append(args, "-DFAKE_GOCCL")
	}
	for _, d := range defines {
		args = append(args, "-D"+d)
	}
	b, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

func itoa(v int) string { return string(appendInt(nil, v)) }

func appendInt(b []byte, v int) []byte {
	if v >= 10 {
		b = appendInt(b, v/10)
	}
	return append(b, byte('0'+v%10))
}

func TestLoadErrorsNameEveryPath(t *testing.T) {
	dir := t.TempDir()
	list := func() []string {
		return []string{filepath.Join(dir, "a", libName), filepath.Join(dir, "b", libName)}
	}
	for _, tc := range []struct {
		name, setting string
		want          []string
	}{
		{"setting names a missing file", "/nonexistent/libnccl.so.2", []string{"/nonexistent/libnccl.so.2", "GOCCL_NCCL_PATH=/nonexistent/libnccl.so.2 must name"}},
		{"setting names a missing directory", "/nonexistent", []string{"tried /nonexistent:", "GOCCL_NCCL_PATH=/nonexistent"}},
		{"search finds nothing", "", []string{list()[0] + ":", list()[1] + ":", "set GOCCL_NCCL_PATH", "pip install"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(tc.setting, list)
			require.Error(t, err)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, ErrUnavailable)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestLoadRejectsGocclAndOldReleases(t *testing.T) {
	dir := t.TempDir()
	own := buildFake(t, filepath.Join(mkdir(t, dir, "own")), libName, 22800, true)
	old := buildFake(t, filepath.Join(mkdir(t, dir, "old")), libName, 21805, false)
	good := buildFake(t, filepath.Join(mkdir(t, dir, "good")), libName, 22809, false)

	_, err := load(own, nil)
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), own+": goccl's own NCCL-API library")

	_, err = load(filepath.Dir(old), nil) // a directory: the library in it
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), old+": NCCL 2.18.5, goccl needs 2.19.0 or newer")

	// The search skips both and takes the first good one.
	l, err := load("", func() []string { return []string{own, old, good} })
	require.NoError(t, err)
	assert.Equal(t, good, l.Path())
	assert.Equal(t, "2.28.9", l.Version())
}

func mkdir(t *testing.T, parent, name string) string {
	p := filepath.Join(parent, name)
	require.NoError(t, os.MkdirAll(p, 0o755))
	return p
}

func TestCallsReachTheLibrary(t *testing.T) {
	good := buildFake(t, t.TempDir(), libName, 22809, false)
	l, err := load(good, nil)
	require.NoError(t, err)

	id, err := l.GetUniqueID()
	require.NoError(t, err)
	assert.Equal(t, byte(0x5a^7), id[7])

	t.Setenv("NCCL_HOSTID", "before")
	c, err := l.InitRank(0, 3, 2, id, "node-b")
	require.NoError(t, err)
	assert.Equal(t, "before", os.Getenv("NCCL_HOSTID"), "InitRank restores NCCL_HOSTID")
	assert.Equal(t, 3, c.Size())
	assert.Equal(t, 2, c.Rank())

	var bad UniqueID
	_, err = l.InitRank(0, 3, 2, bad, "")
	var ne *Error
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "ncclCommInitRank", ne.Call)
	assert.Equal(t, 4, ne.Result)

	src := []float32{1, 2, 3}
	dst := make([]float32, 3)
	require.NoError(t, c.AllReduce(uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&dst[0])), 3, 7, 4, 0))
	assert.Equal(t, src, dst)

	err = c.Recv(0, 1, 7, 1, 0)
	require.ErrorAs(t, err, &ne)
	assert.ErrorIs(t, err, ErrRemote)
	assert.Contains(t, err.Error(), "ncclRecv")
	assert.Contains(t, err.Error(), "fake last error")

	aerr := c.AsyncError()
	assert.ErrorIs(t, aerr, ErrRemote)
	require.NoError(t, c.Abort())
	assert.NoError(t, c.AsyncError(), "an aborted communicator reports nothing more")
	assert.True(t, errors.Is(c.Send(0, 1, 7, 0, 0), errGone))
	assert.NoError(t, c.Destroy(), "Destroy after Abort does nothing")
}

func TestPreMulSumOperators(t *testing.T) {
	for _, tc := range []struct {
		name    string
		defines []string
	}{{"library has them", nil}, {"library lacks them", []string{"FAKE_NO_PREMUL"}}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(buildFake(t, t.TempDir(), libName, 22809, false, tc.defines...), nil)
			require.NoError(t, err)
			id, err := l.GetUniqueID()
			require.NoError(t, err)
			c, err := l.InitRank(0, 2, 0, id, "")
			require.NoError(t, err)
			defer c.Destroy()
			op, err := c.CreatePreMulSum(7, 0, 2)
			if tc.defines != nil {
				assert.ErrorIs(t, err, ErrNotSupported)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, Op(1107), op, "a scalar read now, its value passed")
			dop, err := c.CreatePreMulSum(0, 0x1000, 2)
			require.NoError(t, err)
			assert.Equal(t, Op(1000), dop, "a scalar in device memory")
			_, err = c.CreatePreMulSum(7, 0, 7)
			var ne *Error
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, "ncclRedOpCreatePreMulSum", ne.Call)
			assert.NoError(t, c.DestroyOp(op))
			assert.NoError(t, c.DestroyOp(dop))
			assert.Error(t, c.DestroyOp(5), "an operator NCCL did not make")
		})
	}
}

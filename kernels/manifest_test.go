package kernels

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManifestMatchesSources fails when a kernel source changed without the
// fatbin being rebuilt (`make kernels` on a machine with nvcc).
func TestManifestMatchesSources(t *testing.T) {
	diffs, err := Stale(".")
	require.NoError(t, err)
	assert.Empty(t, diffs, "kernels/goccl.fatbin is stale: run `make kernels` on the GPU machine and commit goccl.fatbin and manifest.json")
}

func TestStaleDetectsChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	write("a.cu", "kernel a")
	write("common.cuh", "header")
	write("build.sh", "nvcc")
	write("goccl.fatbin", "FATBIN")
	write("notes.txt", "not hashed")
	h, err := SourceHashes(dir)
	require.NoError(t, err)
	require.Len(t, h, 3)
	fat, err := fileSHA256(filepath.Join(dir, "goccl.fatbin"))
	require.NoError(t, err)
	// Independent reference: `echo -n "kernel a" | sha256sum`.
	assert.Equal(t, "2153bab41bd69649642e33a9c06e743b653cd6b02813fc1abd6b1cd14679302c", h["a.cu"])
	manifest := func(srcs map[string]string, fatbin string) {
		b := `{"nvcc":"x","archs":"sm_90","fatbin_sha256":"` + fatbin + `","fatbin_bytes":6,"sources":{`
		first := true
		for k, v := range srcs {
			if !first {
				b += ","
			}
			first = false
			b += `"` + k + `":"` + v + `"`
		}
		write("manifest.json", b+"}}")
	}
	manifest(h, fat)
	d, err := Stale(dir)
	require.NoError(t, err)
	assert.Empty(t, d)

	write("a.cu", "kernel a changed")
	d, err = Stale(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.cu: changed since the fatbin was built"}, d)

	write("a.cu", "kernel a")
	write("b.cu", "new")
	d, err = Stale(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"b.cu: not in manifest"}, d)
	require.NoError(t, os.Remove(filepath.Join(dir, "b.cu")))

	write("goccl.fatbin", "OTHER")
	d, err = Stale(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"goccl.fatbin: not the fatbin the manifest describes"}, d)
}

func TestImageOverride(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.fatbin")
	require.NoError(t, os.WriteFile(p, []byte("fatbin bytes"), 0o644))
	t.Setenv(EnvFatbin, p)
	b, err := Image()
	require.NoError(t, err)
	assert.Equal(t, "fatbin bytes", string(b))

	t.Setenv(EnvFatbin, filepath.Join(t.TempDir(), "missing"))
	_, err = Image()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing")
}

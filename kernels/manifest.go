package kernels

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Manifest is manifest.json, written by build.sh next to the fatbin.
type Manifest struct {
	NVCC         string            `json:"nvcc"`
	Archs        string            `json:"archs"`
	FatbinSHA256 string            `json:"fatbin_sha256"`
	FatbinBytes  int64             `json:"fatbin_bytes"`
	Sources      map[string]string `json:"sources"`
}

// ReadManifest parses the manifest in dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("kernels: read manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("kernels: parse manifest: %w", err)
	}
	return &m, nil
}

// SourceHashes computes the sha256 of every file build.sh hashes in dir:
// *.cu, *.cuh and build.sh.
func SourceHashes(dir string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("kernels: %w", err)
	}
	out := map[string]string{}
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !(strings.HasSuffix(n, ".cu") || strings.HasSuffix(n, ".cuh") || n == "build.sh") {
			continue
		}
		h, err := fileSHA256(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out[n] = h
	}
	return out, nil
}

// Stale lists the differences between the sources in dir and the manifest
// (changed, added or removed files, and a fatbin that is not the one built);
// empty means the committed fatbin was built from these sources.
func Stale(dir string) ([]string, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	cur, err := SourceHashes(dir)
	if err != nil {
		return nil, err
	}
	var diffs []string
	for n, h := range cur {
		switch old, ok := m.Sources[n]; {
		case !ok:
			diffs = append(diffs, n+": not in manifest")
		case old != h:
			diffs = append(diffs, n+": changed since the fatbin was built")
		}
	}
	for n := range m.Sources {
		if _, ok := cur[n]; !ok {
			diffs = append(diffs, n+": in manifest but gone")
		}
	}
	fh, err := fileSHA256(filepath.Join(dir, "goccl.fatbin"))
	if err != nil {
		return nil, err
	}
	if fh != m.FatbinSHA256 {
		diffs = append(diffs, "goccl.fatbin: not the fatbin the manifest describes")
	}
	sort.Strings(diffs)
	return diffs, nil
}

func fileSHA256(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("kernels: %w", err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

package nccl

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unsafe"
)

const libName = "libnccl.so.2"

// pipSuffix is where the nvidia-nccl wheel puts the library under a
// site-packages directory.
var pipSuffix = filepath.Join("nvidia", "nccl", "lib", libName)

// sitePatterns are the usual site-packages directories (globs).
var sitePatterns = []string{
	"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
	"/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages",
	"/opt/conda/lib/python3*/site-packages",
}

// systemDirs are tried after the dynamic linker's own search.
var systemDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/lib", "/usr/local/cuda/lib64", "/opt/nccl/lib",
}

var (
	loadOnce sync.Once
	loadLib  *Library
	loadErr  error
)

// Load opens NCCL once per process (see the package comment for the
// order of the search). The error wraps ErrUnavailable.
func Load() (*Library, error) {
	loadOnce.Do(func() { loadLib, loadErr = load(os.Getenv(EnvPath), candidates) })
	return loadLib, loadErr
}

// candidates lists the paths to try when GOCCL_NCCL_PATH is unset: the
// pip package's first, then the system's.
func candidates() []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	var sites []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := os.Getenv(env); v != "" {
			sites = append(sites, filepath.Join(v, "lib", "python3*", "site-packages"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		sites = append(sites, filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	sites = append(sites, filepath.SplitList(os.Getenv("PYTHONPATH"))...)
	sites = append(sites, sitePatterns...)
	found := false
	for _, s := range sites {
		ms, _ := filepath.Glob(filepath.Join(s, pipSuffix))
		for _, m := range ms {
			add(m)
			found = true
		}
	}
	if !found {
		for _, s := range pythonSites() {
			if _, err := os.Stat(filepath.Join(s, pipSuffix)); err == nil {
				add(filepath.Join(s, pipSuffix))
			}
		}
	}
	add(libName)
	for _, d := range systemDirs {
		add(filepath.Join(d, libName))
	}
	return out
}

// pythonSites asks python3, where there is one, for its site-packages
// directories: a virtual environment or an unusual prefix the globs miss.
func pythonSites() []string {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c",
		"import site,sysconfig;print('\\n'.join(site.getsitepackages()+[site.getusersitepackages(),sysconfig.get_paths()['purelib']]))").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// load tries setting (when set) or each of list's paths.
func load(setting string, list func() []string) (*Library, error) {
	var tried []string
	if setting != "" {
		p := setting
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, libName)
		}
		tried = []string{p}
	} else {
		tried = list()
	}
	var why []string
	for _, p := range tried {
		l, reason := open(p)
		if l != nil {
			return l, nil
		}
		why = append(why, p+": "+reason)
	}
	hint := "install NCCL (pip install nvidia-nccl-cu12, or the distribution's libnccl2) or set " + EnvPath + " to libnccl.so.2 or its directory"
	if setting != "" {
		hint = EnvPath + "=" + setting + " must name NCCL's libnccl.so.2 (" + versionString(MinVersion) + " or newer) or the directory holding it"
	}
	return nil, fmt.Errorf("%w: tried %s; %s", ErrUnavailable, strings.Join(why, "; "), hint)
}

// open loads one path; on failure it says why.
func open(p string) (*Library, string) {
	cp := C.CString(p)
	defer C.free(unsafe.Pointer(cp))
	var buf, probe [512]C.char
	var ver C.int
	switch C.gnccl_load(cp, &buf[0], C.size_t(len(buf)), &ver, &probe[0], C.size_t(len(probe))) {
	case 0:
	case 1:
		return nil, "goccl's own NCCL-API library (it reports " + C.GoString(&probe[0]) + "), not NCCL"
	default:
		return nil, C.GoString(&buf[0])
	}
	if int(ver) < MinVersion {
		// The handle stays open: dlclose of a library whose init ran is
		// not reliably safe, and nothing else will be loaded under it.
		return nil, fmt.Sprintf("NCCL %s, goccl needs %s or newer", versionString(int(ver)), versionString(MinVersion))
	}
	return &Library{path: p, version: int(ver)}, ""
}

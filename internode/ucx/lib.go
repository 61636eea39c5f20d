package ucx

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// Minimum UCX release: the parameter layouts declared here are those of
// 1.13's ucp.h (the oldest Debian stable ships).
const minMajor, minMinor = 1, 13

// libName is the soname of UCX's protocol layer.
const libName = "libucp.so.0"

// searchDirs are tried after the dynamic linker's own search, where
// distributions and source builds put UCX.
var searchDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/usr/local/lib", "/opt/ucx/lib",
}

var (
	loadOnce sync.Once
	loadErr  error
	version  string
)

// Load opens libucp once per process: GOCCL_UCX_PATH (the library, or a
// directory holding it) when set, else libucp.so.0 through the dynamic
// linker, else the usual directories. The error lists every path tried
// and says what to install or set.
func Load() error {
	loadOnce.Do(func() { loadErr = load(os.Getenv("GOCCL_UCX_PATH")) })
	return loadErr
}

// Version is the loaded library's release ("1.13.1"), or "" before Load.
func Version() string { return version }

func load(setting string) error {
	var tried []string
	if setting != "" {
		p := setting
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			p = filepath.Join(p, libName)
		}
		tried = append(tried, p)
	} else {
		tried = append(tried, libName)
		for _, d := range searchDirs {
			tried = append(tried, filepath.Join(d, libName))
		}
	}
	var why []string
	for _, p := range tried {
		cp := C.CString(p)
		var buf [512]C.char
		rc := C.g_load(cp, &buf[0], C.size_t(len(buf)))
		C.free(unsafe.Pointer(cp))
		if rc == 0 {
			var maj, min, rel C.uint
			C.g_version(&maj, &min, &rel)
			version = fmt.Sprintf("%d.%d.%d", maj, min, rel)
			if maj != minMajor || min < minMinor {
				return fmt.Errorf("%w: %s is UCX %s; goccl needs %d.%d or newer with major version %d (set GOCCL_UCX_PATH to a newer libucp.so.0)",
					ErrUnavailable, p, version, minMajor, minMinor, minMajor)
			}
			return nil
		}
		why = append(why, p+": "+C.GoString(&buf[0]))
		if setting == "" && p == libName && !strings.Contains(C.GoString(&buf[0]), "No such file") && !strings.Contains(C.GoString(&buf[0]), "cannot open") {
			break // found but broken: the directories hold the same file
		}
	}
	hint := "install UCX (Debian/Ubuntu: apt-get install libucx0; RHEL: dnf install ucx) or set GOCCL_UCX_PATH to libucp.so.0 or its directory"
	if setting != "" {
		hint = "GOCCL_UCX_PATH=" + setting + " must name libucp.so.0 or the directory holding it"
	}
	return fmt.Errorf("%w: tried %s; %s", ErrUnavailable, strings.Join(why, "; "), hint)
}

// statusString is UCX's text for a status code.
func statusString(s C.int) string { return C.GoString(C.g_status_string(s)) }

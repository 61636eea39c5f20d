package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// versionMain is `goccl version`: the module version (or "devel" for a
// build from a work tree), the source revision when the build recorded
// one, and the Go toolchain and platform.
func versionMain(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("version", "goccl version",
		`Prints goccl's version ("devel" for a build from a work tree), the
source revision where the build recorded one, and Go's version and
platform.`, stdout, stderr)
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return fs.usageError("unexpected arguments %q", fs.Args())
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(info))
	return 0
}

func versionLine(info *debug.BuildInfo) string {
	ver, rev, dirty := "devel", "", false
	if info != nil {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			ver = v
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	line := "goccl " + ver
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		line += " (" + rev
		if dirty {
			line += ", modified"
		}
		line += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", line, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

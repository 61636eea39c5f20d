package launcher

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// procAttr puts each rank in its own process group (so signals reach the
// rank's children too, and a terminal's Ctrl-C reaches it only through the
// launcher) and kills it when the launcher dies. Pdeathsig fires when the
// thread that forked exits, so ranks are started from a locked thread that
// lives as long as the job (see startRanks).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup sends sig to the process group led by pid. A group already
// gone is not an error.
func signalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// processStopped reports whether pid is stopped by a signal (SIGSTOP,
// SIGTSTP...) or a tracer: the state field of /proc/pid/stat, after the
// command name in parentheses, is T or t.
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
}

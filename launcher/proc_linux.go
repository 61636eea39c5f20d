package launcher

import (
	"errors"
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

package nvls

import "golang.org/x/sys/unix"

func closeFDImpl(fd int) error { return unix.Close(fd) }

package shm

import "golang.org/x/sys/unix"

// sysOps are the system calls Map makes; tests replace them to inject
// failures (ENOMEM, EMFILE) that are hard to provoke for real.
type sysOps struct {
	memfdCreate func(name string, flags int) (int, error)
	ftruncate   func(fd int, size int64) error
	fcntl       func(fd, cmd, arg int) (int, error)
	fstatSize   func(fd int) (int64, error)
	mmap        func(fd int, size int, flags int) ([]byte, error)
	munmap      func(b []byte) error
	close       func(fd int) error
}

var sys = sysOps{
	memfdCreate: unix.MemfdCreate,
	ftruncate:   unix.Ftruncate,
	fcntl:       func(fd, cmd, arg int) (int, error) { return unix.FcntlInt(uintptr(fd), cmd, arg) },
	fstatSize: func(fd int) (int64, error) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return 0, err
		}
		return st.Size, nil
	},
	mmap: func(fd int, size int, flags int) ([]byte, error) {
		return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|flags)
	},
	munmap: unix.Munmap,
	close:  unix.Close,
}

package comm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// File rendezvous, for launchers that give ranks but no address (mpirun,
// srun, PMI): rank 0 makes a UniqueID and publishes it in a file whose
// name derives from the user and the job key; the other ranks poll for it.
// A stale file of an earlier job with the same key is harmless: its
// address refuses us or its rank 0 drops us for the wrong magic, and the
// dial loop reads the file again.

func rendezvousPath(jobKey string) string {
	sum := sha256.Sum256([]byte(jobKey))
	return filepath.Join(os.TempDir(), fmt.Sprintf("goccl-%d-%s.id", os.Getuid(), hex.EncodeToString(sum[:12])))
}

// publishID writes id atomically (temporary file, then rename) readable
// only by this user.
func publishID(path string, id UniqueID) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("publishing the bootstrap address: %w", err)
	}
	_, werr := f.WriteString(id.String() + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("publishing the bootstrap address in %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("publishing the bootstrap address in %s: %w", path, err)
	}
	return nil
}

// readPublishedID reads the file unless it is a link or someone else's.
func readPublishedID(path string) (UniqueID, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return UniqueID{}, fmt.Errorf("rank 0 has not published its address in %s yet: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return UniqueID{}, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Getuid() || !st.Mode().IsRegular() {
		return UniqueID{}, fmt.Errorf("%s is not a regular file of this user: ignored", path)
	}
	buf := make([]byte, 2*UniqueIDBytes+2)
	n, _ := f.Read(buf)
	return parseUniqueID(strings.TrimSpace(string(buf[:n])))
}

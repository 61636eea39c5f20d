package comm

import (
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Flight records to the launcher. goccl run gives its ranks a Unix socket
// (GOCCL_RECORDER_SOCK) and the job's token; a process with a recorder
// connects once, when its first communicator forms (until its last
// closes), and sends over it the same compact record the bootstrap
// exchange carries when a communicator aborts (a peer's failure, its own
// call's timeout), when a call fails for ranks in other calls, and when
// it closes; and, whenever the launcher asks (one byte, sent before its
// SIGTERM when it stops a job: a library does not take an application's
// SIGTERM), the records of every live communicator, then an empty frame.
// A goroutine of its own reads the asks, whatever the rank is doing. So
// the launcher learns what each rank was doing without files; a rank
// that is stopped or dead sends nothing, which the launcher tells from
// the others' records.
//
// The wire: the rank's first frame is "goccl-rec1 TOKEN PID RANK" (RANK
// as the launcher gave it: a rank's program may run goccl in a child
// process); every frame is a big-endian uint32 length and that many
// bytes.

// EnvRecorderSock names the launcher's socket ("@name": abstract).
const EnvRecorderSock = "GOCCL_RECORDER_SOCK"

// askRecords is the byte the launcher sends to ask for the records.
const askRecords = 'D'

// launcherWriteWait bounds one write to the launcher: a launcher that
// does not read must not hold up an abort or a Close.
const launcherWriteWait = time.Second

var toLauncher struct {
	mu    sync.Mutex // one frame at a time; guards the fields
	conn  net.Conn   // nil: none (not asked for, failed, or gone)
	tried bool       // dialled since the process's last communicator closed
}

// connectLauncher dials the launcher's socket, once while the process
// has communicators.
func connectLauncher(c *Comm) {
	addr, token, rank := c.obs.set.sock, c.obs.set.token, c.obs.set.jobRank
	if addr == "" {
		return
	}
	toLauncher.mu.Lock()
	defer toLauncher.mu.Unlock()
	if toLauncher.tried {
		return
	}
	toLauncher.tried = true
	conn, err := net.DialTimeout("unix", addr, launcherWriteWait)
	if err != nil {
		c.log.Debug("goccl: flight recorder: no launcher socket", "addr", addr, "err", err)
		return
	}
	if rank == "" {
		rank = "-"
	}
	toLauncher.conn = conn
	if !writeLauncher([]byte("goccl-rec1 " + token + " " + strconv.Itoa(os.Getpid()) + " " + rank)) {
		return
	}
	go answerLauncher(conn)
}

// disconnectLauncher closes the connection when the process's last
// communicator has closed (its record sent): a process holds nothing of
// goccl's once it has none. The next communicator dials again.
func disconnectLauncher() {
	toLauncher.mu.Lock()
	defer toLauncher.mu.Unlock()
	if toLauncher.conn != nil {
		_ = toLauncher.conn.Close()
	}
	toLauncher.conn, toLauncher.tried = nil, false
}

// sendLauncher writes one frame to the launcher; false (and the
// connection dropped) when it cannot.
func sendLauncher(b []byte) bool {
	toLauncher.mu.Lock()
	defer toLauncher.mu.Unlock()
	return writeLauncher(b)
}

// writeLauncher is sendLauncher with toLauncher.mu held.
func writeLauncher(b []byte) bool {
	conn := toLauncher.conn
	if conn == nil {
		return false
	}
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	frame = append(frame, b...)
	_ = conn.SetWriteDeadline(time.Now().Add(launcherWriteWait))
	if _, err := conn.Write(frame); err != nil {
		_ = conn.Close()
		toLauncher.conn = nil
		return false
	}
	return true
}

// answerLauncher sends the live communicators' records each time the
// launcher asks, until the connection ends.
func answerLauncher(conn net.Conn) {
	var buf [64]byte
	for {
		n, err := conn.Read(buf[:])
		for _, b := range buf[:n] {
			if b != askRecords {
				continue
			}
			for _, c := range liveComms() {
				if rec := c.compactRecord("dump", nil); rec != nil {
					sendLauncher(rec)
				}
			}
			sendLauncher(nil)
		}
		if err != nil {
			return
		}
	}
}

// reportLauncher sends rec (a compact record) to the launcher, where
// there is one.
func reportLauncher(rec []byte) {
	if len(rec) > 0 {
		sendLauncher(rec)
	}
}

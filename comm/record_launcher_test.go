package comm

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/goccl/goccl/recorder"
)

func readLauncherFrame(t *testing.T, r io.Reader) []byte {
	t.Helper()
	var hdr [4]byte
	_, err := io.ReadFull(r, hdr[:])
	require.NoError(t, err)
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(r, b)
	require.NoError(t, err)
	return b
}

// TestRecordsToLauncher plays goccl run's side of the records socket:
// the process connects once, says who it is, answers an ask with every
// live communicator's last calls and an empty frame, and sends each
// communicator's record when it closes.
func TestRecordsToLauncher(t *testing.T) {
	addr := fmt.Sprintf("@goccl-comm-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ln, err := net.Listen("unix", addr)
	require.NoError(t, err)
	defer ln.Close()
	const tok = "00112233445566778899aabbccddeeff"
	disconnectLauncher() // one connection a process: this test's own
	t.Cleanup(disconnectLauncher)
	comms := hostCommsEnv(t, 2, map[string]string{EnvRecorderSock: addr, "GOCCL_JOB_TOKEN": tok, "RANK": "7"})
	require.NoError(t, ln.(*net.UnixListener).SetDeadline(time.Now().Add(20*time.Second)))
	conn, err := ln.Accept()
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(20*time.Second)))
	r := bufio.NewReader(conn)
	assert.Equal(t, fmt.Sprintf("goccl-rec1 %s %d 7", tok, os.Getpid()), string(readLauncherFrame(t, r)))

	runCalls(t, comms, []call{{"AllReduce", 64}, {"AllGather", 32}})
	records := func(reason string) map[int]recorder.Record {
		t.Helper()
		got := map[int]recorder.Record{}
		for len(got) < len(comms) {
			b := readLauncherFrame(t, r)
			require.NotEmpty(t, b, "a record before the end of the answer")
			var rec recorder.Record
			require.NoError(t, json.Unmarshal(b, &rec))
			assert.Equal(t, reason, rec.Reason)
			got[rec.Rank] = rec
		}
		return got
	}
	_, err = conn.Write([]byte{'D'})
	require.NoError(t, err)
	for rank, rec := range records("dump") {
		require.Len(t, rec.Calls, 2, "rank %d", rank)
		assert.Equal(t, "AllReduce", rec.Calls[0].Call)
		assert.Equal(t, "AllGather", rec.Calls[1].Call)
		assert.Equal(t, "finished", rec.Calls[1].State)
		assert.Equal(t, uint64(2), rec.Calls[1].Seq)
		assert.Equal(t, 2, rec.Size)
	}
	assert.Empty(t, readLauncherFrame(t, r), "the answer ends with an empty frame")

	errs := eachComm(comms, func(c *Comm) error { return c.Close() })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	got := records("close")
	assert.Len(t, got, 2)
	for rank, rec := range got {
		assert.Empty(t, rec.Error, "rank %d: closed, not aborted", rank)
		assert.Len(t, rec.Calls, 2, "rank %d", rank)
	}
	// The last communicator closed: the process lets go of the socket.
	_, err = r.ReadByte()
	assert.ErrorIs(t, err, io.EOF)
}

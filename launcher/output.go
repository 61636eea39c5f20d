package launcher

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"sync"
)

// maxLine bounds how much of one line is held; a longer line is written in
// pieces of this size, each ended with a newline and tagged.
const maxLine = 1 << 20

// sink serializes whole lines to one destination shared by all ranks.
type sink struct {
	mu sync.Mutex
	w  io.Writer
}

// writeLine writes one line (already ending in '\n') in a single Write.
func (s *sink) writeLine(line []byte) {
	s.mu.Lock()
	// A broken destination must not stall the ranks: keep draining.
	_, _ = s.w.Write(line)
	s.mu.Unlock()
}

// rankTag is the prefix of rank's lines: "[3] ".
func rankTag(rank int) []byte {
	return []byte("[" + strconv.Itoa(rank) + "] ")
}

// pump copies r to s line by line, each line prefixed with tag (may be
// empty). A last line without a newline gets one. It returns when r ends.
func pump(r io.Reader, s *sink, tag []byte) {
	br := bufio.NewReaderSize(r, 64<<10)
	line := append(make([]byte, 0, 4096), tag...)
	flush := func() {
		if len(line) == len(tag) {
			return
		}
		if line[len(line)-1] != '\n' {
			line = append(line, '\n')
		}
		s.writeLine(line)
		line = append(line[:0], tag...)
	}
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			flush()
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line)-len(tag) >= maxLine {
				flush()
			}
		default: // EOF or a closed pipe: emit what is left.
			flush()
			return
		}
	}
}

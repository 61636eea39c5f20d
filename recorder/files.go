package recorder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// FileName is where rank's record of communicator comm lives in a
// recorder directory.
func FileName(rank int, comm string) string { return fmt.Sprintf("rank%d.%s.json", rank, comm) }

// WriteFile writes rec to dir (made if needed) under FileName, whole or
// not at all (a reader never sees half a file), and returns the path.
func WriteFile(dir string, rec *Record) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("recorder: %w", err)
	}
	if rec.Written == 0 {
		rec.Written = time.Now().UnixNano()
	}
	b, err := rec.JSON()
	if err != nil {
		return "", fmt.Errorf("recorder: %w", err)
	}
	path := filepath.Join(dir, FileName(rec.Rank, rec.Comm))
	tmp, err := os.CreateTemp(dir, ".rec-*")
	if err != nil {
		return "", fmt.Errorf("recorder: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return "", fmt.Errorf("recorder: writing %s: %w", path, werr)
	}
	return path, nil
}

// ReadFile reads one record.
func ReadFile(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("recorder: %s: %w", path, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("recorder: %s: record version %d, want %d", path, rec.Version, recordVersion)
	}
	return &rec, nil
}

// ReadRecords reads every record of a file: one (a rank's file) or several
// one after the other (what goccl dump prints for a process with several
// communicators).
func ReadRecords(path string) ([]*Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	defer f.Close()
	var out []*Record
	dec := json.NewDecoder(f)
	for dec.More() {
		var rec Record
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("recorder: %s: record %d: %w", path, len(out)+1, err)
		}
		if rec.Version != recordVersion {
			return nil, fmt.Errorf("recorder: %s: record %d: version %d, want %d (not a flight record?)", path, len(out)+1, rec.Version, recordVersion)
		}
		out = append(out, &rec)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("recorder: %s: no record", path)
	}
	return out, nil
}

// ReadDir reads every record in dir, grouped by communicator: for each
// communicator id a slice indexed by rank (nil where a rank wrote none).
// Files that do not parse are skipped.
func ReadDir(dir string) (map[string][]*Record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "rank*.json"))
	if err != nil {
		return nil, fmt.Errorf("recorder: %w", err)
	}
	out := map[string][]*Record{}
	for _, p := range paths {
		rec, err := ReadFile(p)
		if err != nil || rec.Size <= 0 || rec.Rank < 0 || rec.Rank >= rec.Size {
			continue
		}
		rs := out[rec.Comm]
		if rs == nil {
			rs = make([]*Record, rec.Size)
			out[rec.Comm] = rs
		}
		if rec.Rank < len(rs) {
			rs[rec.Rank] = rec
		}
	}
	return out, nil
}

// LastWritten is when the newest of rs was written, else otherwise: the
// moment a communicator's waits are told as of.
func LastWritten(rs []*Record, otherwise time.Time) time.Time {
	at := int64(0)
	for _, rec := range rs {
		if rec != nil {
			at = max(at, rec.Written)
		}
	}
	if at == 0 {
		return otherwise
	}
	return time.Unix(0, at)
}

// Summaries explains every communicator of dir with records written
// since then, one line each, prefixed with the communicator's id when
// there are several. Waits are told as of the last record written.
func Summaries(dir string, since, now time.Time) ([]string, error) {
	all, err := ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, rs := range all {
		n := 0
		for r, rec := range rs {
			if rec != nil && rec.Written < since.UnixNano() {
				rs[r] = nil // an earlier job's
			}
			if rs[r] != nil {
				n++
			}
		}
		if n > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var out []string
	for _, id := range ids {
		rs := all[id]
		line := Explain(len(rs), rs, LastWritten(rs, now))
		if len(ids) > 1 {
			line = "communicator " + id + ": " + line
		}
		out = append(out, line)
	}
	return out, nil
}

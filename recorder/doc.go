// Package recorder is the flight recorder of a communicator: a fixed ring
// of the calls it was asked to make (number, kind, type, size, peer,
// stream, times, state), per-call statistics, the analysis that names the
// rank a stuck job waits for, and the exports of records (JSON files,
// Chrome trace events, a PNG timeline).
//
// Recording is on the hot path of every call, so on the host Begin and End
// take no lock (one release store each, and a lock every 64 calls to count
// the statistics) and read a cycle counter; they do not allocate. The ring
// is read only on demand (Snapshot), from any goroutine.
package recorder

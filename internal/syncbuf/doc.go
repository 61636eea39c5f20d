// Package syncbuf is a bytes.Buffer that several goroutines may write to
// and read at once: tests hand it to loggers and to the launcher's output
// pumps while they read what has arrived so far.
package syncbuf

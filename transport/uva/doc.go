// Package uva reaches peers' memory within one process: every cuMemAlloc
// pointer is valid on every GPU once peer access is enabled.
package uva

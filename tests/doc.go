// Package tests holds goccl's multi-process CI tests: real binaries built
// from this module (goccl, the conformance program in tests/conformance,
// the examples) run as ranks under `goccl run` on the host backend, and
// checked end to end — exit status, the launcher's reports, and what the
// ranks print.
package tests

// Package docs holds tests that keep the documents under docs/ true to the
// code: settings_test.go fails when the code reads a GOCCL_* variable that
// docs/settings.md does not list, or the page lists one the code no longer
// reads.
package docs

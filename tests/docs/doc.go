// Package docs holds tests that keep the documents under docs/ true to the
// code: settings_test.go fails when the code reads a GOCCL_* variable that
// docs/settings.md does not list, or the page lists one the code no longer
// reads, and guide_test.go fails when a code block of docs/guide.md is not
// taken from the Example it names, links_test.go fails when a page
// links to a file that does not exist, model_test.go fails when a
// table docs/multinode.md took from `goccl model` is no longer what the
// command prints, and commands_test.go fails when a page's `goccl run` or
// `goccl bench` command line no longer parses, or its `go test -bench`
// names a benchmark the package no longer has, and texts_test.go fails when
// the library's errors or log lines leave docs/troubleshooting.md's rule
// (one "goccl: ", which comm gives the errors of the packages below it).
package docs

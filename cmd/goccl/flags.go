package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is the flag set of `goccl name` and its help, in the style of
// run, bench, info and model: a "usage:" synopsis, what the command does,
// and its flags. -h prints the help on stdout; a bad command line prints
// "goccl name: " and the error, then the help, once, on stderr.
type command struct {
	*flag.FlagSet
	name, synopsis, about string
	stdout, stderr        io.Writer
}

func newCommand(name, synopsis, about string, stdout, stderr io.Writer) *command {
	fs := flag.NewFlagSet("goccl "+name, flag.ContinueOnError)
	// The flag package would print its error and the usage without the
	// command's prefix; the command prints both itself.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &command{FlagSet: fs, name: name, synopsis: synopsis, about: about, stdout: stdout, stderr: stderr}
}

// help is the command's whole help text.
func (c *command) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s\n", c.synopsis)
	if c.about != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(c.about, "\n"))
	}
	var flags []string
	width := 0
	c.VisitAll(func(f *flag.Flag) {
		arg, _ := flag.UnquoteUsage(f)
		name := "-" + f.Name
		if arg != "" {
			name += " " + arg
		}
		width = max(width, len(name))
		flags = append(flags, name)
	})
	if len(flags) > 0 {
		b.WriteString("\nflags:\n")
		i := 0
		c.VisitAll(func(f *flag.Flag) {
			_, usage := flag.UnquoteUsage(f)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				usage += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(&b, "  %-*s   %s\n", width, flags[i], usage)
			i++
		})
	}
	return b.String()
}

// parse parses args; when that ends the command it returns false and the
// exit code: 0 for -h (help on stdout), 2 for a bad flag.
func (c *command) parse(args []string) (int, bool) {
	if err := c.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, c.help())
			return 0, false
		}
		return c.usageError("%v", err), false
	}
	return 0, true
}

// usageError prints "goccl name: " and the message, then the help, on
// stderr, and returns the exit code of a usage error.
func (c *command) usageError(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "goccl %s: %s\n%s", c.name, fmt.Sprintf(format, args...), c.help())
	return 2
}

// fail prints "goccl name: " and the message on stderr and returns 1.
func (c *command) fail(format string, args ...any) int {
	fmt.Fprintf(c.stderr, "goccl %s: %s\n", c.name, fmt.Sprintf(format, args...))
	return 1
}

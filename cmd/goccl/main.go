// Command goccl is the user's entry point: run launches multi-rank jobs,
// bench measures collectives in nccl-tests' format, plot draws saved
// bench reports, info shows what the runtime sees and would choose, model
// predicts the cost of collectives across nodes, trace and dump read the
// ranks' flight records.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: goccl <command> [arguments]

commands:
  run      -np N [--tag-output] [--timeout D] [--grace D] prog [args...]
           start N local ranks of prog
  bench    <test> [-b N] [-e N] [-f F] [-n N] [-d TYPE] [-o OP] ...
           time a test in nccl-tests' format; tests: all_reduce, all_gather,
           broadcast, reduce, reduce_scatter, sendrecv, alltoall, gather, scatter
  plot     -o FILE.png RUN.json [PEER.json...]
           busbw against size from saved bench reports
  info     [--json]
           devices, links, and the transport and algorithms goccl would choose
  model    [--nodes LIST] [--sizes LIST] [--markdown] ...
           predicted cost of collectives across nodes (arithmetic, runs nothing)
  trace    [-o trace.json] [-png timeline.png] RECORD.json...
           flight records as a Chrome trace and a timeline
  dump     [-dir D] [-timeout 5s] PID
           a running rank's flight record (SIGUSR1)
  version  goccl's version and Go's

"goccl help <command>" or "goccl <command> -h" shows a command's flags.
`

// commands maps each command's name to its entry point.
var commands = map[string]func(args []string) int{
	"run":     runMain,
	"bench":   benchMain,
	"plot":    plotMain,
	"info":    infoMain,
	"model":   modelMain,
	"version": func(args []string) int { return versionMain(args, os.Stdout, os.Stderr) },
	"trace":   traceMain,
	"dump":    dumpMain,
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(dispatch(os.Args[1], os.Args[2:]))
}

// dispatch runs command cmd and returns its exit code.
func dispatch(cmd string, args []string) int {
	switch cmd {
	case "--version":
		cmd = "version"
	case "help", "-h", "-help", "--help":
		if len(args) == 0 {
			fmt.Print(usage)
			return 0
		}
		if _, ok := commands[args[0]]; !ok {
			fmt.Fprintf(os.Stderr, "goccl help: unknown command %q\n%s", args[0], usage)
			return 2
		}
		cmd, args = args[0], []string{"-h"}
	}
	run, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(os.Stderr, "goccl: unknown command %q\n%s", cmd, usage)
		return 2
	}
	return run(args)
}

// Command meshctl is the operator's tool for meshd: keys, grants, receipt
// logs, sensors and models, and a client of a running daemon (serve,
// receipts, backends, meters, verify -remote, bench).
package main

import (
	"context"
	"fmt"
	"io"

	"meshd/cmd/internal/cli"
	"meshd/internal/buildinfo"
)

// command is one meshctl subcommand. Each lives in its own file.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"keygen", "write a new steward key file (0600, never overwritten)", cmdKeygen},
		{"token", "a new bearer token for meshd and the digest line that grants it roles", cmdToken},
		{"verify", "verify a receipt log or a single envelope; -remote: a running meshd's chain", cmdVerifyAny},
		{"log", "repair a damaged receipt log; print its newest checkpoint", cmdLog},
		{"grant", "issue, show and verify JCP grants", cmdGrant},
		{"probe", "list the power sensors found and what each reads", cmdProbe},
		{"model", "synthesise and inspect GGUF models", cmdModel},
		{"serve", "ask a running meshd; print the answer and its verified receipt", cmdServe},
		{"receipts", "tail a running meshd's receipts (-f to follow), verified and linked", cmdReceipts},
		{"backends", "a running meshd's backends, their costs and state", cmdBackends},
		{"meters", "a running meshd's meters and live power (-watch to refresh)", cmdMeters},
		{"corpus", "RAG corpora: hash, sign and verify descriptions; describe and query a running meshd", cmdCorpus},
		{"fleet", "verify a fleet's receipt chains from NATS JetStream (fleet verify); a signed µJ/token report of them (fleet report)", cmdFleetAll},
		{"bench", "benchmark µJ per token: run a workload into a signed report; verify, compare, plot, csv", cmdBench},
		{"version", "print the build: module version, VCS revision, Go version, architecture", cmdVersion},
	}
}

// errUsage marks an error caused by how the command was called.
var errUsage = cli.ErrUsage

// flagError is the error of a subcommand's flag parsing (cli.FlagError).
func flagError(err error) error { return cli.FlagError(err) }

func cmdVersion(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) != 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	fmt.Fprintln(stdout, buildinfo.Read().String())
	return nil
}

func main() { cli.Main("meshctl", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return fmt.Errorf("%w: no subcommand", errUsage)
	}
	if cli.IsHelp(args[0]) {
		usage(stdout)
		return nil
	}
	if args[0] == "-version" || args[0] == "--version" {
		return cmdVersion(ctx, nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	usage(stderr)
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: meshctl <subcommand> [flags]   (meshctl <subcommand> -h: its flags)")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
}

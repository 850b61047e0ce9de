// Command meshd is the mesh/1 agent. `meshd serve -config FILE` runs the
// daemon: the HTTP API over the node the file describes. `meshd
// check-config -config FILE` lists every problem of a configuration
// without starting. `meshd demo` runs the whole serve lifecycle end to end
// — route, meter, seal, verify — through a daemon it starts on loopback,
// with a synthesised GGUF model and the best meter it finds. `meshd
// version` names the build; `meshd -h` and `meshd SUBCOMMAND -h` list the
// subcommands and their flags.
package main

import (
	"context"
	"fmt"
	"io"

	"meshd/cmd/internal/cli"
	"meshd/internal/buildinfo"
)

// errUsage marks an error caused by how the command was called.
var errUsage = cli.ErrUsage

// flagError is the error of a subcommand's flag parsing (cli.FlagError).
func flagError(err error) error { return cli.FlagError(err) }

func main() { cli.Main("meshd", run) }

// subcommands lists meshd's subcommands for its usage, in the order shown.
var subcommands = []struct{ name, summary string }{
	{"serve", "run the daemon over the node -config FILE describes"},
	{"check-config", "list every problem of -config FILE without starting anything"},
	{"demo", "route, meter, seal and verify serves through a daemon on loopback"},
	{"demo-fleet", "three nodes, a front door and the fleet stream on loopback"},
	{"version", "print the build: module version, VCS revision, Go version, architecture"},
	{"help", "this text; `meshd SUBCOMMAND -h` lists a subcommand's flags"},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: meshd <subcommand> [flags]")
	for _, c := range subcommands {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return fmt.Errorf("%w: no subcommand", errUsage)
	}
	switch {
	case cli.IsHelp(args[0]):
		usage(stdout)
		return nil
	case cli.IsVersion(args[0]):
		fmt.Fprintln(stdout, buildinfo.Read().String())
		return nil
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "demo-fleet":
		return runDemoFleet(ctx, args[1:], stdout, stderr)
	case "serve":
		return runServe(ctx, args[1:], stdout, stderr)
	case "check-config":
		return checkConfig(args[1:], stdout, stderr)
	}
	usage(stderr)
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
}

// Command meshd is the mesh/1 agent. `meshd serve -config FILE` runs the
// daemon: the HTTP API over the node the file describes. `meshd
// check-config -config FILE` lists every problem of a configuration
// without starting. `meshd demo` runs the whole serve lifecycle end to end
// — route, meter, seal, verify — through a daemon it starts on loopback,
// with a synthesised GGUF model and the best meter it finds.
package main

import (
	"context"
	"fmt"
	"io"

	"meshd/cmd/internal/cli"
)

// errUsage marks an error caused by how the command was called.
var errUsage = cli.ErrUsage

func main() { cli.Main("meshd", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: meshd serve -config FILE | meshd check-config -config FILE | meshd demo [flags]")
		return fmt.Errorf("%w: no subcommand", errUsage)
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
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
}

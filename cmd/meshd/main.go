// Command meshd is the mesh/1 agent. `meshd demo` runs the whole serve
// lifecycle end to end — route, meter, seal, verify — on reference
// backends and a synthesised GGUF model, with no hardware and no
// configuration, or metered by a real sensor with -meter.
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
		fmt.Fprintln(stderr, "usage: meshd demo [flags]   (meshd demo -h lists them)")
		return fmt.Errorf("%w: no subcommand", errUsage)
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, args[0])
}

package main

import (
	"context"
	"errors"
	"io"
)

// cmdProbe is a placeholder until the probe subcommand lands.
func cmdProbe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("probe: not implemented yet")
}

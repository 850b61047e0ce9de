package main

import (
	"context"
	"errors"
	"io"
)

// cmdGrant is a placeholder until the grant subcommand lands.
func cmdGrant(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("grant: not implemented yet")
}

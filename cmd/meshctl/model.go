package main

import (
	"context"
	"errors"
	"io"
)

// cmdModel is a placeholder until the model subcommand lands.
func cmdModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return errors.New("model: not implemented yet")
}

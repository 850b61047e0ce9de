// Package cli is the little the meshd command-line tools share: how they
// start, stop on a signal, and turn an error into an exit status.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ErrUsage marks an error caused by how a command was called; it exits 2.
var ErrUsage = errors.New("usage")

// Main runs run with a context cancelled by SIGINT or SIGTERM and exits:
// 0 on success, 2 for a usage error, 1 for anything else, with the error on
// stderr prefixed by the command's name.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		if errors.Is(err, ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

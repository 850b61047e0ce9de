package main

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"

	"meshd/steward"
)

func cmdKeygen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "steward.key", "key file to write (refuses to overwrite)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	// A stray argument is most likely a key path given without -o; writing
	// the key to the default path instead would surprise.
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: keygen takes only flags (-o FILE), got %q", errUsage, fs.Args())
	}
	k, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	if err := steward.WriteKeyFile(*out, k); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (mode 0600)\nsteward %s\n", *out, k.ID())
	return nil
}

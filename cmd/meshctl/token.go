package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"meshd/auth"
)

// cmdToken is `meshctl token -name N -roles R [-o FILE]`: a new bearer
// token (256 random bits) and the line that grants it in a tokens file.
// The daemon keeps only the digest; the token goes to the caller (into
// FILE, mode 0600, never overwritten, when -o is given).
func cmdToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the caller's name, as the daemon logs it (required)")
	roles := fs.String("roles", "", "comma-separated roles: serve, read, operate (required)")
	out := fs.String("o", "", "write the token to this file (0600) instead of printing it")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if *name == "" || strings.ContainsAny(*name, " \t#") || *roles == "" {
		return fmt.Errorf("%w: usage: meshctl token -name NAME -roles serve,read,operate [-o FILE]", errUsage)
	}
	if _, err := auth.ParseRoles(strings.Split(*roles, ",")); err != nil {
		return fmt.Errorf("%w: -roles: %v", errUsage, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return err
	}
	tok := "mshd_" + base64.RawURLEncoding.EncodeToString(raw[:])
	d := auth.HashToken(tok)
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("token file: %w", err)
		}
		if _, err := fmt.Fprintln(f, tok); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "token: %s\n", tok)
	}
	fmt.Fprintf(stdout, "# add to the tokens file (auth.tokens_file), or as [[auth.token]] sha256:\n%s %s %s\n", hex.EncodeToString(d[:]), *name, *roles)
	return nil
}

package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"meshd/steward"
)

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyHex := fs.String("steward", "", "trusted steward id (64 hex); default: the first record's key, printed for you to compare")
	envelope := fs.Bool("envelope", false, "the file is one envelope (binary or hex), not a log")
	quiet := fs.Bool("q", false, "print only the summary")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: verify [-steward ID] [-envelope] <file>", errUsage)
	}
	var trusted ed25519.PublicKey
	if *keyHex != "" {
		k, err := steward.ParsePublicKey(*keyHex)
		if err != nil {
			return err
		}
		trusted = k
	}
	path := fs.Arg(0)
	if *envelope {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if h, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil {
			b = h
		}
		o, err := steward.OpenEnvelope(b, trusted)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(stdout, "envelope OK: sequence %d, request %s, steward %s, id %s\n",
			o.Receipt.Sequence, o.Receipt.RequestID, o.Receipt.Steward, o.ID)
		return nil
	}
	rep, err := steward.VerifyLogFile(path, trusted, func(o *steward.Opened) error {
		if !*quiet {
			r := o.Receipt
			per := "-"
			if r.UJPerAcceptedToken != nil {
				per = fmt.Sprint(*r.UJPerAcceptedToken)
			}
			fmt.Fprintf(stdout, "%6d  %s  %-12s %-10s tokens %d/%d  µJ/tok %s\n",
				r.Sequence, r.RequestID[:16], r.Backend, r.EnergyProvenance, r.TokensAccepted, r.TokensOut, per)
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "log OK: %d receipts, steward %x, head %s\n", rep.Records, []byte(rep.Steward), rep.Head)
	if rep.TornBytes > 0 {
		fmt.Fprintf(stdout, "warning: torn final frame of %d bytes at offset %d (never acknowledged; cut when the log is next opened)\n", rep.TornBytes, rep.TornAt)
	}
	return nil
}

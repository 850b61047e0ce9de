package main

// `meshctl fleet report`: µJ per accepted token per board, backend and
// recipe, from the receipts a fleet publishes to NATS JetStream, written
// as a bench report of kind "fleet" (PROFILE.md §21; made and checked by
// package meshd/bench). These commands dial NATS, write the file and print.

import (
	"context"
	"crypto/ed25519"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/fleet"
	"meshd/bench"
	"meshd/cmd/internal/cli"
	"meshd/steward"
)

// defaultReportDurable is the report's own consumer, so that making a
// report does not move `fleet verify`'s.
const defaultReportDurable = "meshctl-fleet-report"

// printVerifiedFleet writes what a verified fleet report proves.
func printVerifiedFleet(w io.Writer, path string, v *bench.VerifiedFleet) {
	b := &v.Report.Body
	receipts := 0
	for _, bd := range v.Boards {
		receipts += len(bd.Receipts)
	}
	fmt.Fprintf(w, "fleet report %s: %d boards, %d receipts, stream %s up to message %d\n", path, len(v.Boards), receipts, b.Status.Stream, b.Status.StreamSeq)
	fmt.Fprintf(w, "operator: %s (vouches for the aggregation; every receipt verifies under its own steward)\n", b.Operator)
	for _, bd := range v.Boards {
		first := bd.Receipts[0].Receipt.Sequence
		fmt.Fprintf(w, "board %s: receipts %d..%d, every signature and link verified; checkpoint count %d anchors the last\n",
			bd.Steward, first, first+uint64(len(bd.Receipts))-1, bd.Checkpoint.Count)
	}
	if v.Forwarded > 0 {
		fmt.Fprintf(w, "forwarded: %d receipts, %d checked against their upstream receipt in this report\n", v.Forwarded, v.Paired)
	}
	fmt.Fprintf(w, "summary: %d cells (steward × backend × recipe), every figure recomputed from the receipts\n", len(b.Summary.Cells))
	fmt.Fprintf(w, "digests: %d sections\n", len(b.Digests))
	if v.Attestation != nil {
		fmt.Fprintf(w, "attestation: %s signed by the operator at %s over the body's SHA-256 %x\n", v.Attestation.Purpose,
			time.UnixMilli(int64(v.Attestation.SealedMs)).UTC().Format(time.RFC3339), v.Attestation.SHA256)
	}
	for _, p := range b.Problems {
		fmt.Fprintf(w, "listed by the operator: %s\n", p)
	}
}

// verifyFleetFile is `bench verify` on a fleet report.
func verifyFleetFile(path string, data []byte, trust ed25519.PublicKey, stdout io.Writer) error {
	v, problems := bench.VerifyFleet(data, trust)
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "fleet report %s: FAILED, %d problems:\n", path, len(problems))
		for _, p := range problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
		return damaged(fmt.Errorf("fleet report %s does not verify: %s", path, problems[0]))
	}
	printVerifiedFleet(stdout, path, v)
	if trust == nil {
		fmt.Fprintln(stdout, "note: verified under the operator key the report names; pin it with -trust to know whose it is")
	}
	fmt.Fprintln(stdout, "OK")
	return nil
}

// ---- making a report ----

// cmdFleetAll is `meshctl fleet`: `report` here, the rest in fleet.go.
func cmdFleetAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	help := len(args) > 0 && cli.IsHelp(args[0])
	if help {
		stderr = stdout
	}
	switch {
	case len(args) > 0 && args[0] == "report":
		return cmdFleetReport(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "verify":
		return cmdFleet(ctx, args, stdout, stderr)
	}
	fmt.Fprintln(stderr, "usage: meshctl fleet verify [-url U] [-stream S] [-durable D] [-trust FILE] [-state FILE] [-follow]")
	fmt.Fprintln(stderr, "       meshctl fleet report -key OPERATOR.key -o REPORT [-url U] [-stream S] [-durable D] [-trust FILE]")
	if help {
		return nil
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: fleet needs a subcommand (verify, report)", errUsage)
	}
	return fmt.Errorf("%w: unknown fleet subcommand %q (verify, report)", errUsage, args[0])
}

func cmdFleetReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn := connFlags(fs)
	stream := fs.String("stream", fleet.DefaultStream, "JetStream stream holding the receipts")
	durable := fs.String("durable", defaultReportDurable, "durable pull consumer name (the report's own, so fleet verify's is not moved)")
	trustPath := fs.String("trust", "", "file of trusted steward ids, one 64-hex key per line; stewards not in it are left out (without it every steward is accepted under the id its subject names)")
	keyPath := fs.String("key", "", "the operator's key file (meshctl keygen writes one): signs the report")
	out := fs.String("o", "", "the report file to write")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl fleet report -key OPERATOR.key -o REPORT [flags]")
		fmt.Fprintln(stderr, "µJ per accepted token per board, backend and recipe, from the chains that verify; check it with meshctl bench verify, rank it with meshctl bench compare")
		fmt.Fprintln(stderr, "exit status: 0 written and every chain verified, 1 written with problems listed (or not written), 2 usage")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("%w: fleet report takes no arguments (got %q)", errUsage, fs.Args())
	case *keyPath == "" || *out == "":
		fs.Usage()
		return fmt.Errorf("%w: fleet report needs -key and -o", errUsage)
	}
	key, err := steward.LoadKeyFile(*keyPath)
	if err != nil {
		return fmt.Errorf("-key: %w", err)
	}
	var trusted []string
	if *trustPath != "" {
		if trusted, err = readTrustFile(*trustPath); err != nil {
			return err
		}
	}
	conn.Password = os.Getenv("NATS_PASSWORD")
	conn.Name = "meshctl fleet report"
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := fleet.Dial(ctx, *conn, log, 100*time.Millisecond, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := waitConnected(ctx, nc.IsConnected, 10*time.Second); err != nil {
		return fmt.Errorf("nats %s: %w (last error: %v)", fleet.RedactURL(conn.URL), err, nc.LastError())
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	rep, err := bench.BuildFleet(ctx, js, bench.FleetOptions{
		Stream: *stream, Durable: *durable, Trusted: trusted, Key: key, Logger: fleet.Scrub(log, conn.Password), Now: time.Now,
	})
	if err != nil {
		return err
	}
	data, err := bench.EncodeFleet(rep)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fmt.Errorf("fleet report: %w", err)
	}
	fmt.Fprintf(stdout, "fleet report written to %s (signed by operator %s)\n", *out, key.ID())
	printFleetSummary(stdout, rep)
	if n := len(rep.Body.Problems); n > 0 {
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("fleet report: %d problem(s) listed; the stewards they name are left out", n)}
	}
	return nil
}

// printFleetSummary writes a fleet report's cells and problems.
func printFleetSummary(w io.Writer, rep *bench.FleetReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEWARD\tBACKEND/RECIPE\tN\tµJ/TOK MEDIAN\tIQR\tMIN..MAX\tMEDIAN BOUND\tPROVENANCE\tFORWARDED")
	for _, c := range rep.Body.Summary.Cells {
		med, iqr, rng := "-", "-", "-"
		if c.Gross != nil {
			med, iqr, rng = c.Gross.Median.String(), c.Gross.IQR.String(), c.Gross.Min.String()+".."+c.Gross.Max.String()
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", bench.ShortID(c.Steward), c.Backend, c.Recipe, c.Serves, med, iqr, rng,
			bench.BoundText(c.GrossMedianBound), bench.ProvenanceText(c.Provenance), c.Forwarded)
	}
	tw.Flush()
	for _, p := range rep.Body.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

package main

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/wire"
)

// Exit statuses of meshctl verify, so that a script can tell a log that
// was cut short by a power cut from one that was tampered with.
const (
	exitDamaged = 1 // a record, the chain or a checkpoint does not check out
	exitTorn    = 3 // everything checks out but the final write is torn
	exitPinned  = 4 // the log does not reach the pinned head or count: rolled back
	exitNotLog  = 5 // the directory holds no receipt log (no segment, no checkpoints)
)

// maxEnvelopeFile bounds what -envelope and -checkpoint read: an envelope is
// at most 1 MiB, twice that in hex, plus a newline.
const maxEnvelopeFile = 2<<20 + 2

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyHex := fs.String("steward", "", "trusted steward id (64 hex); default: the first record's key, printed for you to compare")
	envelope := fs.Bool("envelope", false, "the file is one envelope (binary or hex), not a log")
	quiet := fs.Bool("q", false, "print only the summary")
	headHex := fs.String("head", "", "a head you kept earlier (64 hex): the chain must contain it")
	count := fs.Uint64("count", 0, "the log must hold at least this many receipts")
	ckPath := fs.String("checkpoint", "", "a checkpoint envelope you kept (binary or hex): verify from it, and require it")
	workers := fs.Int("workers", 0, "parallel signature checks (0: all cores)")
	archive := fs.String("archive", "", "the directory the log's disk budget archives segments to: verify archive plus live log from genesis")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl verify [flags] <log directory | segment file>")
		fmt.Fprintln(stderr, "       meshctl verify -envelope [-steward ID] <file>")
		fmt.Fprintln(stderr, "exit status: 0 verified, 1 damaged or tampered, 2 usage, 3 torn final write, 4 rolled back (pins not reached), 5 not a log")
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\n       meshctl verify -remote [-addr A] [-trust HEXKEY]   (a running meshd's chain)")
		rfs := flag.NewFlagSet("verify -remote", flag.ContinueOnError)
		rfs.SetOutput(stderr)
		remoteVerifyFlags(rfs)
		rfs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: verify takes one path", errUsage)
	}
	trusted, err := trustedFlag(*keyHex)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	if *envelope {
		b, err := readEnvelopeFile(path)
		if err != nil {
			return err
		}
		o, err := steward.OpenEnvelope(b, trusted)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		fmt.Fprintf(stdout, "envelope OK: sequence %d, request %s, steward %s, id %s\n",
			o.Receipt.Sequence, o.Receipt.RequestID, o.Receipt.Steward, o.ID)
		printRoute(stdout, o.Receipt)
		return nil
	}
	opt := steward.VerifyOptions{Trusted: trusted, ExpectCount: *count, Workers: *workers}
	if *headHex != "" {
		h, err := wire.ParseContentID(*headHex)
		if err != nil {
			return fmt.Errorf("%w: -head: %v", errUsage, err)
		}
		opt.ExpectHead = &h
	}
	if *ckPath != "" {
		b, err := readEnvelopeFile(*ckPath)
		if err != nil {
			return err
		}
		cp, err := steward.OpenCheckpoint(b, trusted)
		if err != nil {
			return fmt.Errorf("%s: %w", *ckPath, err)
		}
		opt.Anchor = cp
		if opt.ExpectCount < cp.Count {
			opt.ExpectCount = cp.Count
		}
	}
	opt.Visit = func(o *steward.Opened) error {
		if !*quiet {
			r := o.Receipt
			per := "-"
			if r.UJPerAcceptedToken != nil {
				per = fmt.Sprint(*r.UJPerAcceptedToken)
			}
			id := r.RequestID
			if len(id) > 16 {
				id = id[:16]
			}
			fmt.Fprintf(stdout, "%6d  %s  %-12s %-10s tokens %d/%d  µJ/tok %s\n",
				r.Sequence, id, r.Backend, r.EnergyProvenance, r.TokensAccepted, r.TokensOut, per)
		}
		return nil
	}
	if err := checkIsLog(path); err != nil {
		return err
	}
	// Segments a disk budget moved out of the log (PROFILE.md §8) are
	// named, and without -archive the live log is verified from the
	// checkpoint in its first segment.
	manifest, err := archivedRanges(path)
	if err != nil {
		return err
	}
	for _, r := range steward.Ranges(manifest) {
		fmt.Fprintf(stdout, "not in the live log: %s\n", r)
	}
	var rep *steward.ScanReport
	switch {
	case *archive != "":
		if opt.Anchor != nil {
			return fmt.Errorf("%w: -archive verifies from genesis; -checkpoint starts later", errUsage)
		}
		rep, err = steward.VerifyArchive(ctx, path, *archive, opt)
	default:
		if opt.Anchor == nil && len(manifest) > 0 {
			a, aerr := steward.LiveAnchor(ctx, path, trusted)
			if aerr != nil {
				return &cli.ExitError{Code: exitDamaged, Err: aerr}
			}
			if a != nil {
				opt.Anchor = a
				fmt.Fprintf(stdout, "receipts 0..%d are not checked here (pass -archive DIR to verify from genesis); verifying from the live log's first checkpoint\n", a.Count-1)
			}
		}
		rep, err = steward.VerifyLog(ctx, path, opt)
	}
	switch {
	case errors.Is(err, steward.ErrPinned):
		return &cli.ExitError{Code: exitPinned, Err: err}
	case errors.Is(err, steward.ErrDamaged):
		return &cli.ExitError{Code: exitDamaged, Err: err}
	case err != nil:
		return err
	}
	from := "genesis"
	if *archive != "" {
		from = "genesis, archive " + *archive + " and live log"
	}
	if rep.From != nil {
		from = fmt.Sprintf("checkpoint at %d", rep.From.Count)
	}
	fmt.Fprintf(stdout, "log OK: %d receipts (%d verified from %s) in %d segments, %d checkpoints matched, steward %x, head %s\n",
		rep.Records, rep.Verified, from, rep.Segments, rep.Checkpoints, []byte(rep.Steward), rep.Head)
	printUnchecked(stdout, rep, opt)
	if rep.TornBytes > 0 {
		return &cli.ExitError{Code: exitTorn, Err: fmt.Errorf("torn final write: %d bytes at offset %d of %s (never acknowledged; cut when the log is next opened)",
			rep.TornBytes, rep.TornAt, rep.TornSegment)}
	}
	return nil
}

// archivedRanges reads the archive manifest of a log directory (none for
// a segment file or a log that never archived).
func archivedRanges(path string) ([]steward.Archived, error) {
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		return nil, nil
	}
	return steward.ReadManifest(path)
}

// printUnchecked says what a passing verify did not establish: the
// receipts before a -checkpoint anchor, and whether this is the newest copy
// of the log at all (PROFILE.md §8, "Rollback witness").
func printUnchecked(w io.Writer, rep *steward.ScanReport, opt steward.VerifyOptions) {
	if a := rep.From; a != nil {
		fmt.Fprintf(w, "not checked: receipts 0..%d (up to the checkpoint's head %s in %s): not read, so whether those segments are present, intact, in order or the ones the checkpoint was sealed over is unknown; the checkpoint vouches for them (verify without -checkpoint to check them)\n",
			a.Count-1, a.HeadID, steward.SegmentName(a.Segment))
	}
	if rep.CheckpointsMissing {
		fmt.Fprintf(w, "WARNING: the checkpoints file is missing while the segments hold %d receipts: it was removed or the directory replaced; meshd refuses to start on this log (meshctl log repair -apply recreates it)\n", rep.Records)
	}
	pinned := opt.ExpectHead != nil || opt.ExpectCount > 0 || opt.Anchor != nil
	switch {
	case rep.Latest != nil && rep.Latest.Witness != nil:
		fmt.Fprintf(w, "rollback: the newest checkpoint (%d receipts) is bound to witness value %d; a node whose witness counter reads more refuses this log as an older copy; verify cannot read the counter\n",
			rep.Latest.Count, *rep.Latest.Witness)
	case pinned:
		fmt.Fprintln(w, "rollback: checked only against what you pinned (-head, -count, -checkpoint); the log carries no witness binding")
	default:
		fmt.Fprintln(w, "rollback: cannot be detected: an older copy of this log verifies just the same (pin -head, -count or -checkpoint from a copy you kept, or run the node with a witness)")
	}
}

// printRoute prints the candidates a receipt proves its route by, when it
// carries them; OpenEnvelope has checked that they do.
func printRoute(w io.Writer, r *steward.Receipt) {
	cs, err := r.Candidates()
	if err != nil || cs == nil {
		return
	}
	fmt.Fprintf(w, "route: %s\n", r.Route)
	fmt.Fprintf(w, "candidates (floor %v, ceiling %d µJ):\n", wire.Fidelity(r.FidelityFloor), *r.CeilingUJ)
	for _, c := range cs {
		est := "overflow"
		if !c.Overflow {
			est = fmt.Sprintf("%d µJ", c.EstTotalUJ)
		}
		served := ""
		if c.Backend == r.Backend {
			served = "  <- served"
		}
		fmt.Fprintf(w, "  %-20q %v  est %-14s %s%s\n", c.Backend, c.Fidelity, est, c.Verdict, served)
	}
}

// readEnvelopeFile reads a binary or hex envelope, bounded before it
// allocates.
func readEnvelopeFile(path string) ([]byte, error) {
	b, err := cli.ReadFileLimit(path, maxEnvelopeFile)
	if err != nil {
		return nil, err
	}
	if h, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil {
		b = h
	}
	return b, nil
}

func cmdLog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: log repair|checkpoint <log directory>", errUsage)
	}
	if cli.IsHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: meshctl log repair|checkpoint [flags] <log directory>   (meshctl log repair -h: its flags)")
		return nil
	}
	switch args[0] {
	case "repair":
		return logRepair(ctx, args[1:], stdout, stderr)
	case "checkpoint":
		return logCheckpoint(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("%w: unknown log subcommand %q (repair, checkpoint)", errUsage, args[0])
}

func logRepair(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("log repair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyHex := fs.String("steward", "", "trusted steward id (64 hex)")
	apply := fs.Bool("apply", false, "do it; without -apply only say what would be done")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: log repair [-steward ID] [-apply] <log directory>", errUsage)
	}
	trusted, err := trustedFlag(*keyHex)
	if err != nil {
		return err
	}
	rep, err := steward.RepairLog(ctx, fs.Arg(0), trusted, *apply)
	if err != nil {
		return err
	}
	verb := map[bool]string{false: "would", true: "did"}[rep.Applied]
	switch {
	case rep.Damage != nil:
		fmt.Fprintf(stdout, "damage: %v\n", rep.Damage)
		fmt.Fprintf(stdout, "%s keep %d receipts and move everything from sequence %d on into a quarantine directory\n", verb, rep.Records, rep.Damage.Sequence)
		fmt.Fprintln(stdout, "receipts moved away leave the chain; a grant ledger keeps their debits (reconcile by hand)")
	case rep.TornBytes > 0:
		fmt.Fprintf(stdout, "torn final write of %d bytes: %s cut it; %d receipts kept\n", rep.TornBytes, verb, rep.Records)
	default:
		fmt.Fprintf(stdout, "log OK: %d receipts\n", rep.Records)
	}
	if rep.CheckpointsDropped != 0 {
		fmt.Fprintf(stdout, "%s drop the checkpoints beyond the kept receipts\n", verb)
	}
	for _, m := range rep.Moved {
		fmt.Fprintf(stdout, "moved %s to %s\n", m, rep.Quarantine)
	}
	if !rep.Applied && (rep.Damage != nil || rep.TornBytes > 0) {
		fmt.Fprintln(stdout, "run again with -apply to do it")
	}
	return nil
}

func logCheckpoint(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("log checkpoint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	keyHex := fs.String("steward", "", "trusted steward id (64 hex)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: log checkpoint [-steward ID] <log directory>", errUsage)
	}
	trusted, err := trustedFlag(*keyHex)
	if err != nil {
		return err
	}
	rep, err := steward.VerifyLog(ctx, fs.Arg(0), steward.VerifyOptions{Trusted: trusted})
	if err != nil {
		return err
	}
	if rep.Latest == nil {
		return fmt.Errorf("%s has no checkpoint yet", fs.Arg(0))
	}
	// Printed as hex: keep it; `meshctl verify -checkpoint` takes it back.
	fmt.Fprintln(stdout, hex.EncodeToString(rep.Latest.Envelope))
	fmt.Fprintf(stderr, "checkpoint: %d receipts, head %s, steward %x\n", rep.Latest.Count, rep.Latest.HeadID, []byte(rep.Latest.Key))
	return nil
}

// trustedFlag parses a -steward flag: empty means no key pinned.
func trustedFlag(id string) (ed25519.PublicKey, error) {
	if id == "" {
		return nil, nil
	}
	k, err := steward.ParsePublicKey(id)
	if err != nil {
		return nil, fmt.Errorf("%w: -steward: %v", errUsage, err)
	}
	return k, nil
}

// checkIsLog refuses a directory that holds no receipt log, so that a
// wrong path (an empty directory, the state directory instead of its
// receipts/) is not reported as a verified log of 0 receipts.
func checkIsLog(path string) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.IsDir() {
		return nil // a segment file, or an error VerifyLog reports
	}
	has, err := steward.HasLog(path)
	if err != nil || has {
		return err
	}
	inner := filepath.Join(path, "receipts")
	if ok, _ := steward.HasLog(inner); ok {
		return &cli.ExitError{Code: exitNotLog, Err: fmt.Errorf("not a log: %s holds no receipt segments; it looks like a state directory, whose log is %s", path, inner)}
	}
	return &cli.ExitError{Code: exitNotLog, Err: fmt.Errorf("not a log: %s holds no receipt segments and no checkpoints", path)}
}

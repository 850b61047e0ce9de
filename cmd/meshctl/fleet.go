package main

// meshctl fleet verify: consume a fleet's receipts from NATS JetStream and
// verify every steward's chain. The checks live in agent/fleet's Verifier;
// this file parses flags, reads the trust list, runs the consumer and
// prints the report.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/fleet"
	"meshd/cmd/internal/cli"
	"meshd/steward"
)

// maxTrustFile bounds -trust: a line per steward, a million boards fit.
const maxTrustFile = 128 << 20

func cmdFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprintln(stderr, "usage: meshctl fleet verify [-url U] [-stream S] [-durable D] [-trust FILE] [-state FILE] [-shards N] [-follow]")
		if len(args) == 0 {
			return fmt.Errorf("%w: fleet needs a subcommand (verify)", errUsage)
		}
		return fmt.Errorf("%w: unknown fleet subcommand %q (verify)", errUsage, args[0])
	}
	return cmdFleetVerify(ctx, args[1:], stdout, stderr)
}

func cmdFleetVerify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conn := connFlags(fs)
	stream := fs.String("stream", fleet.DefaultStream, "JetStream stream holding the receipts")
	durable := fs.String("durable", fleet.DefaultDurable, "durable pull consumer name")
	trustPath := fs.String("trust", "", "file of trusted steward ids, one 64-hex key per line (# comments); without it every steward is accepted under the id its subject names")
	statePath := fs.String("state", "", "file keeping each steward's verified head between runs; without it every run starts from the stream's beginning")
	follow := fs.Bool("follow", false, "keep consuming and print problems as they appear, until interrupted")
	shards := fs.Int("shards", 0, "verify a stream partitioned into this many shards by steward (fleet.ShardedStreamConfig), one consumer and verifier per shard (durable D-<k>, state FILE.<k>); 0: not sharded")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl fleet verify [flags]")
		fmt.Fprintln(stderr, "The password is read from $NATS_PASSWORD, never from a flag (flags show in ps).")
		fmt.Fprintln(stderr, "exit status: 0 every chain verified, 1 a problem was found, 2 usage")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: fleet verify takes no arguments", errUsage)
	}
	if *shards < 0 || *shards > 4096 {
		return fmt.Errorf("%w: -shards %d: want 0 (not sharded) to 4096", errUsage, *shards)
	}
	conn.Password = os.Getenv("NATS_PASSWORD")
	conn.Name = "meshctl fleet verify"

	cfg := fleet.VerifierConfig{}
	if *trustPath != "" {
		ids, err := readTrustFile(*trustPath)
		if err != nil {
			return err
		}
		cfg.Trusted = ids
	} else {
		fmt.Fprintln(stderr, "meshctl: no -trust list: every steward id on the stream is accepted (each envelope must still be signed by the key its subject names)")
	}
	vs := make([]*fleet.Verifier, max(1, *shards))
	statePaths := make([]string, len(vs))
	for k := range vs {
		vs[k] = fleet.NewVerifier(cfg)
		if *statePath == "" {
			continue
		}
		statePaths[k] = *statePath
		if *shards > 0 {
			statePaths[k] = fmt.Sprintf("%s.%d", *statePath, k)
		}
		if err := vs[k].LoadState(statePaths[k]); err != nil {
			return err
		}
	}
	report := func() fleet.Report {
		rs := make([]fleet.Report, len(vs))
		for k, v := range vs {
			rs[k] = v.Report()
		}
		if len(rs) == 1 {
			return rs[0]
		}
		return fleet.MergeReports(rs...)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := fleet.Dial(ctx, *conn, log, 100*time.Millisecond, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	cc := fleet.ConsumeConfig{Stream: *stream, Durable: *durable, Follow: *follow, Logger: fleet.Scrub(log, conn.Password)}
	var save func(k int) error
	if *statePath != "" {
		save = func(k int) error { return vs[k].SaveState(statePaths[k]) }
	}
	if *follow {
		var mu sync.Mutex
		seen := map[string]int{}
		cc.OnBatch = func() {
			mu.Lock()
			defer mu.Unlock()
			printNewProblems(stdout, report(), seen)
		}
	}
	if !*follow {
		// A run that cannot reach the server must fail, not wait forever:
		// the client retries in the background, so bound the wait here.
		if err := waitConnected(ctx, nc.IsConnected, 10*time.Second); err != nil {
			return fmt.Errorf("nats %s: %w (last error: %v)", fleet.RedactURL(conn.URL), err, nc.LastError())
		}
	}
	if *shards > 0 {
		err = fleet.ConsumeShards(ctx, js, vs, cc, save)
	} else {
		if save != nil {
			cc.Save = func() error { return save(0) }
		}
		err = fleet.Consume(ctx, js, vs[0], cc)
	}
	if err != nil {
		return err
	}
	r := report()
	printFleetReport(stdout, r)
	if n := r.ProblemCount(); n > 0 {
		return &cli.ExitError{Code: 1, Err: fmt.Errorf("fleet verify: %d problem(s) in %d steward(s)", n, badStewards(r))}
	}
	return nil
}

// waitConnected polls up until the connection is made or d passes.
func waitConnected(ctx context.Context, up func() bool, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !up() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not connected within %v", d)
		case <-t.C:
		}
	}
	return nil
}

// readTrustFile reads steward ids, one per line; blank lines and # comments
// are skipped, and anything else that is not a public key is refused with
// its line number.
func readTrustFile(path string) ([]string, error) {
	b, err := cli.ReadFileLimit(path, maxTrustFile)
	if err != nil {
		return nil, fmt.Errorf("-trust: %w", err)
	}
	ids := []string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if _, err := steward.ParsePublicKey(line); err != nil {
			return nil, fmt.Errorf("-trust %s line %d: %w", path, n, err)
		}
		ids = append(ids, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-trust %s: %w", path, err)
	}
	if len(ids) == 0 {
		return nil, errors.New("-trust " + path + ": no steward ids: every steward would be reported untrusted")
	}
	return ids, nil
}

func badStewards(r fleet.Report) int {
	n := 0
	for _, s := range r.Stewards {
		if !s.OK() {
			n++
		}
	}
	return n
}

// printFleetReport prints a line per steward: its verified head, count,
// its problems by kind and the first that a message showed; then the
// problems that name no steward, and a summary by kind.
func printFleetReport(w io.Writer, r fleet.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEWARD\tCOUNT\tHEAD\tCHECKPOINT\tDUPLICATES\tPROBLEMS\tKINDS\tFIRST PROBLEM")
	receipts := uint64(0)
	for _, s := range r.Stewards {
		receipts += s.Count
		head := "-"
		if s.Count > 0 {
			head = fmt.Sprintf("seq %d %s", s.Count-1, s.Head)
		}
		first, kinds := "OK", "-"
		if p, ok := s.First(); ok {
			first = p.Kind + ": " + p.Detail
			kinds = fleet.KindsString(s.Kinds)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\t%s\n", s.Steward, s.Count, head, s.Checkpoint, s.Duplicates, s.ProblemCount, kinds, first)
	}
	tw.Flush()
	for _, p := range r.Fleet {
		fmt.Fprintln(w, "fleet problem:", p)
	}
	summary := fmt.Sprintf("fleet: %d stewards, %d receipts verified, %d problem(s)", len(r.Stewards), receipts, r.ProblemCount())
	if k := fleet.KindsString(r.Kinds()); k != "" {
		summary += ": " + k
	}
	fmt.Fprintln(w, summary)
}

// printNewProblems prints, in -follow mode, the problems not printed yet.
// Gaps come and go, so they are printed when first seen and again only
// if the count of a steward's problems grows.
func printNewProblems(w io.Writer, r fleet.Report, seen map[string]int) {
	for _, s := range r.Stewards {
		if s.ProblemCount > seen[s.Steward] {
			for _, p := range s.Problems[min(seen[s.Steward], len(s.Problems)):] {
				fmt.Fprintln(w, "problem:", p)
			}
			seen[s.Steward] = s.ProblemCount
		}
	}
	if len(r.Fleet) > seen[""] {
		for _, p := range r.Fleet[seen[""]:] {
			fmt.Fprintln(w, "fleet problem:", p)
		}
		seen[""] = len(r.Fleet)
	}
}

// connFlags defines the NATS connection flags that fleet verify and
// fleet report share; the server URL defaults to $NATS_URL when set.
func connFlags(fs *flag.FlagSet) *fleet.ConnOptions {
	defURL := "nats://127.0.0.1:4222"
	if v := os.Getenv("NATS_URL"); v != "" {
		defURL = v
	}
	conn := &fleet.ConnOptions{}
	fs.StringVar(&conn.URL, "url", defURL, "NATS server URL(s), comma-separated (default from $NATS_URL when set)")
	fs.StringVar(&conn.Creds, "creds", "", "NATS user credentials file (JWT and NKey)")
	fs.StringVar(&conn.NKeySeedFile, "nkey", "", "NATS user NKey seed file")
	fs.StringVar(&conn.User, "user", "", "NATS user name")
	fs.StringVar(&conn.CAFile, "tlsca", "", "CA certificate file that verifies the server")
	fs.StringVar(&conn.CertFile, "tlscert", "", "client certificate file (mutual TLS)")
	fs.StringVar(&conn.KeyFile, "tlskey", "", "client key file (mutual TLS)")
	return conn
}

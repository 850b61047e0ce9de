package main

// `meshctl fleet report`: µJ per accepted token per board, backend and
// recipe, from the receipts a fleet publishes to NATS JetStream, written
// as a bench report of kind "fleet" (PROFILE.md §21) so that `bench
// verify` checks it and `bench compare` ranks it by the same rules as a
// bench run. Only chains the fleet verifier (agent/fleet, the code of
// `fleet verify`) found whole are used; what it found wrong is listed in
// the report. The operator signs the aggregation; every receipt in it
// still verifies under its own steward.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/api"
	"meshd/agent/fleet"
	"meshd/cmd/internal/cli"
	"meshd/steward"
)

const (
	// fleetKind marks a fleet report's body; a bench report has no kind.
	fleetKind = "fleet"
	// fleetPurpose is the attestation's purpose: the operator's signature
	// over a fleet report cannot pass for a steward's over a bench run.
	fleetPurpose = "meshd-fleet-report/v1"
	// defaultReportDurable is the report's own consumer, so that making a
	// report does not move `fleet verify`'s.
	defaultReportDurable = "meshctl-fleet-report"
)

// fleetReport is the file: the body and the operator's attestation over
// the SHA-256 of the body's canonical JSON.
type fleetReport struct {
	Body        fleetBody `json:"body"`
	Attestation string    `json:"attestation"`
}

// fleetBody is everything the operator's attestation covers.
type fleetBody struct {
	Format string `json:"format"`
	Kind   string `json:"kind"`
	// Operator is the key (64 hex) that signed the attestation: whoever
	// ran the aggregation, not a board.
	Operator string      `json:"operator"`
	Status   fleetStatus `json:"status"`
	// Boards are the stewards whose chains verified, by steward id, each
	// with its receipts up to its newest checkpoint.
	Boards []fleetBoard `json:"boards"`
	// Problems are what the fleet verifier found, and the stewards left
	// out because of it. They are the operator's statement, not evidence.
	Problems []string     `json:"problems"`
	Summary  fleetSummary `json:"summary"`
	// Digests are the SHA-256 (hex) of each other section's canonical
	// JSON, as in a bench report.
	Digests map[string]string `json:"digests"`
}

// fleetStatus says where in the stream the report was made, and how.
type fleetStatus struct {
	GeneratedUnixMs int64  `json:"generated_unix_ms"`
	Harness         string `json:"harness"`
	Stream          string `json:"stream"`
	// StreamSeq is the last stream message the verifier read; Messages
	// how many it read.
	StreamSeq uint64 `json:"stream_seq"`
	Messages  uint64 `json:"messages"`
	// Trusted is how many steward ids the operator's trust list held; 0
	// means there was none, and every steward was accepted under the key
	// its subject names.
	Trusted int `json:"trusted"`
}

// fleetBoard is one steward's verified chain segment: from First to the
// receipt its checkpoint anchors.
type fleetBoard struct {
	Steward string       `json:"steward"`
	Chain   chainSection `json:"chain"`
	// Unanchored counts the receipts the verifier verified past the
	// checkpoint: no checkpoint vouches for them yet, so they wait for a
	// later report.
	Unanchored uint64 `json:"unanchored"`
}

// fleetSummary is every figure, computed by summariseFleet.
type fleetSummary struct {
	Cells []fleetCell `json:"cells"`
}

// fleetCell is one steward's receipts of one backend and recipe, with a
// bench cell's figures (made by the same fillCell).
type fleetCell struct {
	Steward string `json:"steward"`
	Backend string `json:"backend"`
	Recipe  string `json:"recipe"`
	// Forwarded counts receipts of serves this board forwarded to another
	// node (PROFILE §19): their figure is the upstream receipt's.
	Forwarded int `json:"forwarded"`
	summaryCell
}

// fleetDigestSections are the body's sections a digest is kept for.
var fleetDigestSections = []string{"format", "kind", "operator", "status", "boards", "problems", "summary"}

// reportKind reads a report's kind without judging the rest of it: "" for
// a bench report, "fleet" for a fleet report.
func reportKind(data []byte) string {
	var peek struct {
		Body struct {
			Kind string `json:"kind"`
		} `json:"body"`
	}
	if err := json.Unmarshal(data, &peek); err != nil {
		// A damaged file is still named by its kind, so that verify
		// reports it as the kind it is; the canonical form has no spaces.
		if bytes.Contains(data, []byte(`"kind":"fleet"`)) {
			return fleetKind
		}
		return ""
	}
	return peek.Body.Kind
}

// ---- the summary ----

// openedBoard is one board's segment, opened.
type openedBoard struct {
	steward  string
	receipts []*steward.Opened
}

// summariseFleet computes the fleet summary: a cell per steward, backend
// and recipe, in that order, each from fillCell without an idle baseline
// (the fleet stream has no idle windows, so there are no net figures).
func summariseFleet(boards []openedBoard) fleetSummary {
	out := fleetSummary{Cells: []fleetCell{}}
	for _, b := range boards {
		type key struct{ backend, recipe string }
		groups := map[key][]*steward.Receipt{}
		var keys []key
		for _, o := range b.receipts {
			k := key{o.Receipt.Backend, o.Receipt.Recipe}
			if _, ok := groups[k]; !ok {
				keys = append(keys, k)
			}
			groups[k] = append(groups[k], o.Receipt)
		}
		sort.Slice(keys, func(i, j int) bool {
			if keys[i].backend != keys[j].backend {
				return keys[i].backend < keys[j].backend
			}
			return keys[i].recipe < keys[j].recipe
		})
		for _, k := range keys {
			c := fleetCell{Steward: b.steward, Backend: k.backend, Recipe: k.recipe}
			for _, r := range groups[k] {
				if r.UpstreamReceipt != nil {
					c.Forwarded++
				}
			}
			fillCell(&c.summaryCell, groups[k], nil, nil)
			out.Cells = append(out.Cells, c)
		}
	}
	return out
}

// ---- verification ----

// verifiedFleet is a fleet report with its evidence opened.
type verifiedFleet struct {
	rep    *fleetReport
	key    ed25519.PublicKey // the operator's
	boards []verifiedBoard
	att    *api.Attestation
	// forwarded counts forwarded receipts; paired those checked against
	// their upstream receipt, which the report also holds.
	forwarded, paired int
}

// verifiedBoard is one board's segment with its anchor.
type verifiedBoard struct {
	steward  string
	receipts []*steward.Opened
	cp       *steward.SignedCheckpoint
}

// short names a steward in tables: its first 12 hex digits.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// checkFleetReport verifies a fleet report file: its form, each board's
// chain segment under the board's steward key and the checkpoint that
// anchors it, each forwarded receipt against its upstream receipt where
// the report holds both, every summary figure recomputed, the section
// digests and the operator's attestation. trust, when set, is the operator
// key the report must be signed with. Every problem begins with its place.
func checkFleetReport(data []byte, trust ed25519.PublicKey) (*verifiedFleet, []string) {
	var rep fleetReport
	if err := decodeStrict(data, &rep, "a fleet report"); err != nil {
		return nil, []string{"file: " + err.Error()}
	}
	v := &verifiedFleet{rep: &rep}
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	body := &rep.Body
	problems = append(problems, canonicalProblems(data)...)
	if body.Format != benchFormat {
		add("format: %q, want %q", body.Format, benchFormat)
	}
	if body.Kind != fleetKind {
		add("kind: %q, want %q", body.Kind, fleetKind)
	}
	var err error
	v.key, err = steward.ParsePublicKey(body.Operator)
	if err != nil {
		add("operator: %v", err)
		return v, problems
	}
	if trust != nil && !trust.Equal(v.key) {
		add("operator: the report is signed by %s, not by the trusted key %s", body.Operator, hex.EncodeToString(trust))
	}

	// Each board's segment: signatures, sequences, links, the anchor.
	allOpen := true
	byID := map[string]*steward.Opened{}
	for i := range body.Boards {
		b := &body.Boards[i]
		where := fmt.Sprintf("boards[%d] (steward %s)", i, short(b.Steward))
		if i > 0 && b.Steward <= body.Boards[i-1].Steward {
			add("%s: boards are not in steward order, or a steward appears twice", where)
		}
		key, err := steward.ParsePublicKey(b.Steward)
		if err != nil {
			add("%s: %v", where, err)
			allOpen = false
			continue
		}
		_, list, err := openSegment(b.Chain, key)
		if err != nil {
			add("%s %v", where, err)
			allOpen = false
			continue
		}
		cp, err := checkAnchor(b.Chain, list, key)
		if err != nil {
			add("%s chain.checkpoint: %v", where, err)
			allOpen = false
			continue
		}
		v.boards = append(v.boards, verifiedBoard{steward: b.Steward, receipts: list, cp: cp})
		for _, o := range list {
			byID[o.ID.String()] = o
		}
	}

	// A forwarded receipt restates its upstream receipt: where the report
	// holds both, they must agree (PROFILE §19's pair check).
	for i, b := range v.boards {
		for _, o := range b.receipts {
			r := o.Receipt
			if r.UpstreamReceipt == nil {
				continue
			}
			v.forwarded++
			up := byID[*r.UpstreamReceipt]
			if up == nil {
				continue // its upstream is not in the report, or not anchored yet
			}
			v.paired++
			where := fmt.Sprintf("boards[%d] (steward %s) receipt %d", i, short(b.steward), r.Sequence)
			if d := pairMismatch(r, up); d != "" {
				add("%s: forwarded from receipt %s, which %s", where, *r.UpstreamReceipt, d)
			}
		}
	}

	// Every summary figure, recomputed by the code that made it.
	if allOpen {
		opened := make([]openedBoard, len(v.boards))
		for i, b := range v.boards {
			opened[i] = openedBoard{steward: b.steward, receipts: b.receipts}
		}
		problems = append(problems, diffFleetSummary(body.Summary, summariseFleet(opened))...)
	} else {
		add("summary: not recomputed: a board's chain segment does not verify")
	}

	if got, err := digestsOf(body, fleetDigestSections); err != nil {
		add("digests: %v", err)
	} else {
		problems = append(problems, digestProblems(body.Digests, got)...)
	}

	// The operator's signature over the canonical body.
	if rep.Attestation == "" {
		add("attestation: none: nothing binds this report to an operator")
	} else if env, err := base64.StdEncoding.Strict().DecodeString(rep.Attestation); err != nil {
		add("attestation: not base64: %v", err)
	} else if a, err := api.OpenAttestation(env, v.key); err != nil {
		add("attestation: the signature does not verify under the operator key: %v", err)
	} else if c, err := canonicalJSON(body); err != nil {
		add("attestation: the body has no canonical form: %v", err)
	} else {
		v.att = a
		sum := sha256.Sum256(c)
		switch {
		case a.Purpose != fleetPurpose:
			add("attestation: signed for %q, not a %s", a.Purpose, fleetPurpose)
		case a.Steward != body.Operator:
			add("attestation: names signer %s, the report's operator is %s", a.Steward, body.Operator)
		case !bytes.Equal(a.SHA256, sum[:]):
			add("attestation: the operator signed body SHA-256 %x, the body's is %x: the body was altered after signing", a.SHA256, sum)
		}
	}
	return v, problems
}

// pairMismatch says how a forwarded receipt r differs from its upstream
// receipt up, or returns "".
func pairMismatch(r *steward.Receipt, up *steward.Opened) string {
	u := up.Receipt
	re, err1 := r.Energy()
	ue, err2 := u.Energy()
	switch {
	case r.UpstreamSteward == nil || *r.UpstreamSteward != hex.EncodeToString(up.Key):
		return fmt.Sprintf("was sealed by %s, not the x_upstream_steward named", hex.EncodeToString(up.Key))
	case u.RequestID != r.RequestID:
		return fmt.Sprintf("answers request %s, this one %s", u.RequestID, r.RequestID)
	case u.Recipe != r.Recipe:
		return fmt.Sprintf("names recipe %s, this one %s", u.Recipe, r.Recipe)
	case u.TokensIn != r.TokensIn || u.TokensOut != r.TokensOut || u.TokensAccepted != r.TokensAccepted:
		return fmt.Sprintf("counts %d/%d/%d tokens in/out/accepted, this one %d/%d/%d",
			u.TokensIn, u.TokensOut, u.TokensAccepted, r.TokensIn, r.TokensOut, r.TokensAccepted)
	case err1 != nil || err2 != nil:
		return fmt.Sprintf("cannot be compared: %v", errors.Join(err1, err2))
	case u.EnergyProvenance != r.EnergyProvenance || ue.UJ() != re.UJ():
		return fmt.Sprintf("charges %d µJ (%s), this one %d µJ (%s)", ue.UJ(), u.EnergyProvenance, re.UJ(), r.EnergyProvenance)
	}
	return ""
}

// diffFleetSummary compares the stated summary with the recomputed one,
// naming each cell that differs by its steward, backend and recipe.
func diffFleetSummary(stated, got fleetSummary) []string {
	if len(stated.Cells) != len(got.Cells) {
		return []string{fmt.Sprintf("summary: %d cells, the receipts give %d", len(stated.Cells), len(got.Cells))}
	}
	var out []string
	for i, c := range got.Cells {
		where := fmt.Sprintf("summary cell %s %s/%s (summary.cells[%d])", short(c.Steward), c.Backend, c.Recipe, i)
		if d := diffJSON(where, stated.Cells[i], c); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// printVerifiedFleet writes what a verified fleet report proves.
func printVerifiedFleet(w io.Writer, path string, v *verifiedFleet) {
	b := &v.rep.Body
	receipts := 0
	for _, bd := range v.boards {
		receipts += len(bd.receipts)
	}
	fmt.Fprintf(w, "fleet report %s: %d boards, %d receipts, stream %s up to message %d\n", path, len(v.boards), receipts, b.Status.Stream, b.Status.StreamSeq)
	fmt.Fprintf(w, "operator: %s (vouches for the aggregation; every receipt verifies under its own steward)\n", b.Operator)
	for _, bd := range v.boards {
		first := bd.receipts[0].Receipt.Sequence
		fmt.Fprintf(w, "board %s: receipts %d..%d, every signature and link verified; checkpoint count %d anchors the last\n",
			bd.steward, first, first+uint64(len(bd.receipts))-1, bd.cp.Count)
	}
	if v.forwarded > 0 {
		fmt.Fprintf(w, "forwarded: %d receipts, %d checked against their upstream receipt in this report\n", v.forwarded, v.paired)
	}
	fmt.Fprintf(w, "summary: %d cells (steward × backend × recipe), every figure recomputed from the receipts\n", len(b.Summary.Cells))
	fmt.Fprintf(w, "digests: %d sections\n", len(b.Digests))
	if v.att != nil {
		fmt.Fprintf(w, "attestation: %s signed by the operator at %s over the body's SHA-256 %x\n", v.att.Purpose,
			time.UnixMilli(int64(v.att.SealedMs)).UTC().Format(time.RFC3339), v.att.SHA256)
	}
	for _, p := range b.Problems {
		fmt.Fprintf(w, "listed by the operator: %s\n", p)
	}
}

// verifyFleetFile is `bench verify` on a fleet report.
func verifyFleetFile(path string, data []byte, trust ed25519.PublicKey, stdout io.Writer) error {
	v, problems := checkFleetReport(data, trust)
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

// compareEntries are the fleet report's cells as compare ranks them: a
// cell per board, matched across boards and reports by backend/recipe.
func (v *verifiedFleet) compareEntries(name string) []keyedEntry {
	var out []keyedEntry
	for _, c := range v.rep.Body.Summary.Cells {
		out = append(out, keyedEntry{
			key:   cmpKey{fleet: c.Backend + "/" + c.Recipe},
			entry: &cmpEntry{name: name + "@" + c.Steward[:8], board: "steward " + short(c.Steward), recipe: c.Recipe, cell: c.summaryCell},
		})
	}
	return out
}

// ---- making a report ----

// cmdFleetAll is `meshctl fleet`: `report` here, the rest in fleet.go.
func cmdFleetAll(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "report":
		return cmdFleetReport(ctx, args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "verify":
		return cmdFleet(ctx, args, stdout, stderr)
	}
	fmt.Fprintln(stderr, "usage: meshctl fleet verify [-url U] [-stream S] [-durable D] [-trust FILE] [-state FILE] [-follow]")
	fmt.Fprintln(stderr, "       meshctl fleet report -key OPERATOR.key -o REPORT [-url U] [-stream S] [-durable D] [-trust FILE]")
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
		return fmt.Errorf("%w: %v", errUsage, err)
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
	rep, err := buildFleetReport(ctx, js, fleetReportOptions{
		stream: *stream, durable: *durable, trusted: trusted, key: key, logger: fleet.Scrub(log, conn.Password), now: time.Now,
	})
	if err != nil {
		return err
	}
	data, err := encodeFleetReport(rep)
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
func printFleetSummary(w io.Writer, rep *fleetReport) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEWARD\tBACKEND/RECIPE\tN\tµJ/TOK MEDIAN\tIQR\tMIN..MAX\tMEDIAN BOUND\tPROVENANCE\tFORWARDED")
	for _, c := range rep.Body.Summary.Cells {
		med, iqr, rng := "-", "-", "-"
		if c.Gross != nil {
			med, iqr, rng = c.Gross.Median.String(), c.Gross.IQR.String(), c.Gross.Min.String()+".."+c.Gross.Max.String()
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", short(c.Steward), c.Backend, c.Recipe, c.Serves, med, iqr, rng,
			boundText(c.GrossMedianBound), provenanceText(c.Provenance), c.Forwarded)
	}
	tw.Flush()
	for _, p := range rep.Body.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

// fleetReportOptions configure buildFleetReport.
type fleetReportOptions struct {
	stream, durable string
	trusted         []string // nil: no trust list
	key             *steward.Key
	logger          *slog.Logger
	now             func() time.Time
}

// collected is what the stream holds of one steward: envelopes by
// sequence and checkpoint envelopes by count.
type collected struct {
	receipts    map[uint64][]byte
	checkpoints map[uint64][]byte
}

// buildFleetReport verifies the stream with agent/fleet's consumer and
// verifier, reads the envelopes of the chains it found whole, and returns
// the signed report. The report is checked by checkFleetReport before it
// is returned, so a report this writes is one bench verify accepts.
func buildFleetReport(ctx context.Context, js jetstream.JetStream, o fleetReportOptions) (*fleetReport, error) {
	if o.stream == "" {
		o.stream = fleet.DefaultStream
	}
	v := fleet.NewVerifier(fleet.VerifierConfig{Trusted: o.trusted})
	// No state file: every report verifies each chain from its first
	// receipt, as the segments it writes start there.
	if err := fleet.Consume(ctx, js, v, fleet.ConsumeConfig{Stream: o.stream, Durable: o.durable, Logger: o.logger}); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fleet report: %w", err)
	}
	vr := v.Report()
	pos := v.Position()
	// The verifier keeps heads, not envelopes: read them again, up to
	// the message it stopped at, so both passes saw the same stream.
	want := map[string]bool{}
	for _, s := range vr.Stewards {
		want[s.Steward] = s.OK() && s.Checkpoint > 0
	}
	held, err := collectEnvelopes(ctx, js, o.stream, pos, want)
	if err != nil {
		return nil, err
	}
	body := fleetBody{
		Format: benchFormat, Kind: fleetKind, Operator: o.key.ID(),
		Status: fleetStatus{GeneratedUnixMs: o.now().UnixMilli(), Harness: "meshctl " + api.Version(), Stream: o.stream,
			StreamSeq: pos, Messages: vr.Messages, Trusted: len(o.trusted)},
		Boards: []fleetBoard{}, Problems: []string{},
	}
	for _, p := range vr.Fleet {
		body.Problems = append(body.Problems, p.String())
	}
	var opened []openedBoard
	for _, s := range vr.Stewards {
		leave := func(why string) {
			body.Problems = append(body.Problems, fmt.Sprintf("steward %s: left out: %s", s.Steward, why))
		}
		if !s.OK() {
			for _, p := range s.Problems {
				body.Problems = append(body.Problems, p.String())
			}
			if more := s.ProblemCount - len(s.Problems); more > 0 {
				body.Problems = append(body.Problems, fmt.Sprintf("steward %s: %d more problems not kept", s.Steward, more))
			}
			leave("its chain does not verify")
			continue
		}
		if s.Checkpoint == 0 {
			leave(fmt.Sprintf("no published checkpoint matches its %d verified receipts, so nothing anchors them yet", s.Count))
			continue
		}
		b, list, err := boardSegment(s, held[s.Steward])
		if err != nil {
			leave(err.Error())
			continue
		}
		body.Boards = append(body.Boards, b)
		opened = append(opened, openedBoard{steward: s.Steward, receipts: list})
	}
	body.Summary = summariseFleet(opened)
	if body.Digests, err = digestsOf(&body, fleetDigestSections); err != nil {
		return nil, err
	}
	c, err := canonicalJSON(&body)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(c)
	payload, err := cbor.Marshal(api.Attestation{Purpose: fleetPurpose, SHA256: sum[:], Steward: o.key.ID(), SealedMs: uint64(o.now().UnixMilli())})
	if err != nil {
		return nil, fmt.Errorf("fleet report: attestation: %w", err)
	}
	env, err := steward.Sign1(o.key, payload)
	if err != nil {
		return nil, fmt.Errorf("fleet report: signing: %w", err)
	}
	rep := &fleetReport{Body: body, Attestation: base64.StdEncoding.EncodeToString(env)}
	data, err := encodeFleetReport(rep)
	if err != nil {
		return nil, err
	}
	if _, problems := checkFleetReport(data, o.key.Public()); len(problems) > 0 {
		return nil, fmt.Errorf("fleet report: the report made does not verify (a bug): %s", problems[0])
	}
	return rep, nil
}

// boardSegment is a verified steward's segment: its receipts from 0 to the
// newest checkpoint the verifier matched, and that checkpoint.
func boardSegment(s fleet.StewardReport, held *collected) (fleetBoard, []*steward.Opened, error) {
	if held == nil {
		return fleetBoard{}, nil, errors.New("its messages are no longer in the stream")
	}
	key, err := steward.ParsePublicKey(s.Steward)
	if err != nil {
		return fleetBoard{}, nil, err
	}
	ch := chainSection{First: 0, Envelopes: make([]string, 0, s.Checkpoint)}
	for seq := uint64(0); seq < s.Checkpoint; seq++ {
		env, ok := held.receipts[seq]
		if !ok {
			return fleetBoard{}, nil, fmt.Errorf("receipt %d is no longer in the stream (expired or purged since it was verified)", seq)
		}
		ch.Envelopes = append(ch.Envelopes, base64.StdEncoding.EncodeToString(env))
	}
	cp, ok := held.checkpoints[s.Checkpoint]
	if !ok {
		return fleetBoard{}, nil, fmt.Errorf("its checkpoint of %d receipts is no longer in the stream", s.Checkpoint)
	}
	ch.Checkpoint = base64.StdEncoding.EncodeToString(cp)
	// Opened again here, by the code verify runs: what the verifier
	// accepted from the stream and what the report holds must agree.
	_, list, err := openSegment(ch, key)
	if err != nil {
		return fleetBoard{}, nil, err
	}
	if _, err := checkAnchor(ch, list, key); err != nil {
		return fleetBoard{}, nil, fmt.Errorf("checkpoint: %w", err)
	}
	return fleetBoard{Steward: s.Steward, Chain: ch, Unanchored: s.Count - s.Checkpoint}, list, nil
}

// collectEnvelopes reads the stream from its first message to message
// last through an ordered consumer (nothing on the server to clean up),
// keeping the first envelope seen at each steward's sequence and each
// checkpoint by its count, of the stewards want names. A message past
// last is not read: the verifier did not judge it.
func collectEnvelopes(ctx context.Context, js jetstream.JetStream, stream string, last uint64, want map[string]bool) (map[string]*collected, error) {
	out := map[string]*collected{}
	if last == 0 {
		return out, nil
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", stream, err)
	}
	holder := func(id string) *collected {
		c := out[id]
		if c == nil {
			c = &collected{receipts: map[uint64][]byte{}, checkpoints: map[uint64][]byte{}}
			out[id] = c
		}
		return c
	}
	for seen := uint64(0); seen < last; {
		batch, err := cons.Fetch(fleet.DefaultFetch, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read stream %s: %w", stream, err)
			}
			seen = meta.Sequence.Stream
			if seen > last {
				break
			}
			keepMessage(m.Subject(), m.Data(), want, holder)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read stream %s: %w", stream, err)
		}
		if n == 0 {
			// The messages up to last were removed (age, purge) after the
			// verifier read them; boardSegment names what is missing.
			break
		}
	}
	return out, nil
}

// keepMessage files one message by its subject's last token, the steward
// (so sharded subjects, FLEET.md, need nothing more). Envelopes are kept
// only if they open under the subject's key, so that nothing forged can
// take a receipt's place; boardSegment then checks the segment whole.
func keepMessage(subject string, data []byte, want map[string]bool, holder func(string) *collected) {
	id := subject[strings.LastIndexByte(subject, '.')+1:]
	if !want[id] {
		return
	}
	key, err := steward.ParsePublicKey(id)
	if err != nil {
		return // the verifier has listed it
	}
	switch {
	case strings.HasPrefix(subject, fleet.ReceiptPrefix):
		o, err := steward.OpenEnvelope(data, key)
		if err != nil {
			return
		}
		c := holder(id)
		if _, dup := c.receipts[o.Receipt.Sequence]; !dup {
			c.receipts[o.Receipt.Sequence] = slices.Clone(data)
		}
	case strings.HasPrefix(subject, fleet.CheckpointPrefix):
		cp, err := steward.OpenCheckpoint(data, key)
		if err != nil {
			return
		}
		c := holder(id)
		if _, dup := c.checkpoints[cp.Count]; !dup {
			c.checkpoints[cp.Count] = slices.Clone(data)
		}
	}
}

// encodeFleetReport is the report file: its canonical JSON and a newline.
func encodeFleetReport(r *fleetReport) ([]byte, error) {
	c, err := canonicalJSON(r)
	if err != nil {
		return nil, err
	}
	return append(c, '\n'), nil
}

package bench

// The fleet report (`meshctl fleet report`): µJ per accepted token per
// board, backend and recipe, from the receipts a fleet publishes to NATS
// JetStream, written as a bench report of kind "fleet" (PROFILE.md §21),
// so that VerifyFleet checks it and Compare ranks it by the same rules as
// a bench run. Only chains the fleet verifier (agent/fleet, the code of
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
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/api"
	"meshd/agent/fleet"
	"meshd/steward"
)

const (
	// FleetKind marks a fleet report's body; a bench report has no kind.
	FleetKind = "fleet"
	// FleetPurpose is the attestation's purpose: the operator's signature
	// over a fleet report cannot pass for a steward's over a bench run.
	FleetPurpose = "meshd-fleet-report/v1"
)

// FleetReport is the file: the body and the operator's attestation over
// the SHA-256 of the body's canonical JSON.
type FleetReport struct {
	Body        FleetBody `json:"body"`
	Attestation string    `json:"attestation"`
}

// FleetBody is everything the operator's attestation covers.
type FleetBody struct {
	Format string `json:"format"`
	Kind   string `json:"kind"`
	// Operator is the key (64 hex) that signed the attestation: whoever
	// ran the aggregation, not a board.
	Operator string      `json:"operator"`
	Status   FleetStatus `json:"status"`
	// Boards are the stewards whose chains verified, by steward id, each
	// with its receipts up to its newest checkpoint.
	Boards []FleetBoard `json:"boards"`
	// Problems are what the fleet verifier found, and the stewards left
	// out because of it. They are the operator's statement, not evidence.
	Problems []string     `json:"problems"`
	Summary  FleetSummary `json:"summary"`
	// Digests are the SHA-256 (hex) of each other section's canonical
	// JSON, as in a bench report.
	Digests map[string]string `json:"digests"`
}

// FleetStatus says where in the stream the report was made, and how.
type FleetStatus struct {
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

// FleetBoard is one steward's verified chain segment: from First to the
// receipt its checkpoint anchors.
type FleetBoard struct {
	Steward string `json:"steward"`
	Chain   Chain  `json:"chain"`
	// Unanchored counts the receipts the verifier verified past the
	// checkpoint: no checkpoint vouches for them yet, so they wait for a
	// later report.
	Unanchored uint64 `json:"unanchored"`
}

// FleetSummary is every figure, computed by summariseFleet.
type FleetSummary struct {
	Cells []FleetCell `json:"cells"`
}

// FleetCell is one steward's receipts of one backend and recipe, with a
// bench cell's figures (made by the same fillCell).
type FleetCell struct {
	Steward string `json:"steward"`
	Backend string `json:"backend"`
	Recipe  string `json:"recipe"`
	// Forwarded counts receipts of serves this board forwarded to another
	// node (PROFILE §19): their figure is the upstream receipt's.
	Forwarded int `json:"forwarded"`
	CellSummary
}

// fleetDigestSections are the body's sections a digest is kept for.
var fleetDigestSections = []string{"format", "kind", "operator", "status", "boards", "problems", "summary"}

// Kind reads a report's kind without judging the rest of it: "" for
// a bench report, "fleet" for a fleet report.
func Kind(data []byte) string {
	var peek struct {
		Body struct {
			Kind string `json:"kind"`
		} `json:"body"`
	}
	if err := json.Unmarshal(data, &peek); err != nil {
		// A damaged file is still named by its kind, so that verify
		// reports it as the kind it is; the canonical form has no spaces.
		if bytes.Contains(data, []byte(`"kind":"fleet"`)) {
			return FleetKind
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
func summariseFleet(boards []openedBoard) FleetSummary {
	out := FleetSummary{Cells: []FleetCell{}}
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
			c := FleetCell{Steward: b.steward, Backend: k.backend, Recipe: k.recipe}
			for _, r := range groups[k] {
				if r.UpstreamReceipt != nil {
					c.Forwarded++
				}
			}
			fillCell(&c.CellSummary, groups[k], nil, nil)
			out.Cells = append(out.Cells, c)
		}
	}
	return out
}

// ---- verification ----

// VerifiedFleet is a fleet report with its evidence opened.
type VerifiedFleet struct {
	Report      *FleetReport
	Key         ed25519.PublicKey // the operator's
	Boards      []VerifiedBoard
	Attestation *api.Attestation
	// Forwarded counts Forwarded receipts; Paired those checked against
	// their upstream receipt, which the report also holds.
	Forwarded, Paired int
}

// VerifiedBoard is one board's segment with its anchor.
type VerifiedBoard struct {
	Steward    string
	Receipts   []*steward.Opened
	Checkpoint *steward.SignedCheckpoint
}

// ShortID names a steward in tables: its first 12 hex digits.
func ShortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// VerifyFleet verifies a fleet report file: its form, each board's
// chain segment under the board's steward key and the checkpoint that
// anchors it, each forwarded receipt against its upstream receipt where
// the report holds both, every summary figure recomputed, the section
// digests and the operator's attestation. trust, when set, is the operator
// key the report must be signed with. Every problem begins with its place.
func VerifyFleet(data []byte, trust ed25519.PublicKey) (*VerifiedFleet, []Problem) {
	rep, err := DecodeFleet(data)
	if err != nil {
		return nil, []Problem{{Place: "file", What: err.Error()}}
	}
	v := &VerifiedFleet{Report: rep}
	var problems []Problem
	add := func(place, format string, a ...any) { problems = append(problems, problemf(place, format, a...)) }
	body := &rep.Body
	problems = append(problems, canonicalProblems(data)...)
	if body.Format != FleetFormat {
		add("format", "%q, want %q", body.Format, FleetFormat)
	}
	if body.Kind != FleetKind {
		add("kind", "%q, want %q", body.Kind, FleetKind)
	}
	if v.Key, err = signerKey("operator", body.Operator, trust, add); err != nil {
		return v, problems
	}

	// Each board's segment: signatures, sequences, links, the anchor.
	allOpen := true
	byID := map[string]*steward.Opened{}
	for i := range body.Boards {
		b := &body.Boards[i]
		where := fmt.Sprintf("boards[%d] (steward %s)", i, ShortID(b.Steward))
		if i > 0 && b.Steward <= body.Boards[i-1].Steward {
			add(where, "boards are not in steward order, or a steward appears twice")
		}
		key, err := steward.ParsePublicKey(b.Steward)
		if err != nil {
			add(where, "%v", err)
			allOpen = false
			continue
		}
		_, list, err := openSegment(b.Chain, key)
		if err != nil {
			p := problemOf("chain", err)
			p.Place = where + " " + p.Place
			problems = append(problems, p)
			allOpen = false
			continue
		}
		cp, err := checkAnchor(b.Chain, list, key)
		if err != nil {
			add(where+" chain.checkpoint", "%v", err)
			allOpen = false
			continue
		}
		v.Boards = append(v.Boards, VerifiedBoard{Steward: b.Steward, Receipts: list, Checkpoint: cp})
		for _, o := range list {
			byID[o.ID.String()] = o
		}
	}

	// A forwarded receipt restates its upstream receipt: where the report
	// holds both, they must agree (PROFILE §19's pair check).
	for i, b := range v.Boards {
		for _, o := range b.Receipts {
			r := o.Receipt
			if r.UpstreamReceipt == nil {
				continue
			}
			v.Forwarded++
			up := byID[*r.UpstreamReceipt]
			if up == nil {
				continue // its upstream is not in the report, or not anchored yet
			}
			v.Paired++
			where := fmt.Sprintf("boards[%d] (steward %s) receipt %d", i, ShortID(b.Steward), r.Sequence)
			if d := pairMismatch(r, up); d != "" {
				add(where, "forwarded from receipt %s, which %s", *r.UpstreamReceipt, d)
			}
		}
	}

	// Every summary figure, recomputed by the code that made it.
	if allOpen {
		opened := make([]openedBoard, len(v.Boards))
		for i, b := range v.Boards {
			opened[i] = openedBoard{steward: b.Steward, receipts: b.Receipts}
		}
		problems = append(problems, diffFleetSummary(body.Summary, summariseFleet(opened))...)
	} else {
		add("summary", "not recomputed: a board's chain segment does not verify")
	}

	if got, err := digestsOf(body, fleetDigestSections); err != nil {
		add("digests", "%v", err)
	} else {
		problems = append(problems, digestProblems(body.Digests, got)...)
	}

	// The operator's signature over the canonical body.
	if rep.Attestation == "" {
		add("attestation", "none: nothing binds this report to an operator")
	} else if env, err := base64.StdEncoding.Strict().DecodeString(rep.Attestation); err != nil {
		add("attestation", "not base64: %v", err)
	} else if a, err := api.OpenAttestation(env, v.Key); err != nil {
		add("attestation", "the signature does not verify under the operator key: %v", err)
	} else if c, err := canonicalJSON(body); err != nil {
		add("attestation", "the body has no canonical form: %v", err)
	} else {
		v.Attestation = a
		sum := sha256.Sum256(c)
		switch {
		case a.Purpose != FleetPurpose:
			add("attestation", "signed for %q, not a %s", a.Purpose, FleetPurpose)
		case a.Steward != body.Operator:
			add("attestation", "names signer %s, the report's operator is %s", a.Steward, body.Operator)
		case !bytes.Equal(a.SHA256, sum[:]):
			add("attestation", "the operator signed body SHA-256 %x, the body's is %x: the body was altered after signing", a.SHA256, sum)
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
func diffFleetSummary(stated, got FleetSummary) []Problem {
	if len(stated.Cells) != len(got.Cells) {
		return []Problem{problemf("summary", "%d cells, the receipts give %d", len(stated.Cells), len(got.Cells))}
	}
	var out []Problem
	for i, c := range got.Cells {
		where := fmt.Sprintf("summary cell %s %s/%s (summary.cells[%d])", ShortID(c.Steward), c.Backend, c.Recipe, i)
		if d := diffJSON(where, stated.Cells[i], c); d != nil {
			out = append(out, *d)
		}
	}
	return out
}

// Entries are the fleet report's cells as Compare ranks them: a cell per
// board, matched across boards and reports by backend/recipe, named name
// and the steward.
func (v *VerifiedFleet) Entries(name string) []Entry {
	var out []Entry
	for _, c := range v.Report.Body.Summary.Cells {
		out = append(out, Entry{Key: Key{Fleet: c.Backend + "/" + c.Recipe},
			Name: name + "@" + c.Steward[:8], Board: "steward " + ShortID(c.Steward), Recipe: c.Recipe, Cell: c.CellSummary})
	}
	return out
}

// FleetOptions configure BuildFleet.
type FleetOptions struct {
	// Stream is the JetStream stream holding the receipts (default
	// agent/fleet's DefaultStream); Durable the pull consumer the
	// verifier reads it with.
	Stream, Durable string
	// Trusted are the steward ids accepted; nil: no trust list, every
	// steward is accepted under the id its subject names.
	Trusted []string
	// Key is the operator's key, which signs the report.
	Key *steward.Key
	// Logger receives the consumer's warnings.
	Logger *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Harness names the program in the report's status; empty, it is
	// meshctl at this build's version.
	Harness string
}

// collected is what the stream holds of one steward: envelopes by
// sequence and checkpoint envelopes by count.
type collected struct {
	receipts    map[uint64][]byte
	checkpoints map[uint64][]byte
}

// BuildFleet verifies the stream with agent/fleet's consumer and
// verifier, reads the envelopes of the chains it found whole, and returns
// the signed report. The report is checked by VerifyFleet before it
// is returned, so a report this writes is one bench verify accepts.
func BuildFleet(ctx context.Context, js jetstream.JetStream, o FleetOptions) (*FleetReport, error) {
	if o.Stream == "" {
		o.Stream = fleet.DefaultStream
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Harness == "" {
		o.Harness = "meshctl " + api.Version()
	}
	v := fleet.NewVerifier(fleet.VerifierConfig{Trusted: o.Trusted})
	// No state file: every report verifies each chain from its first
	// receipt, as the segments it writes start there.
	if err := fleet.Consume(ctx, js, v, fleet.ConsumeConfig{Stream: o.Stream, Durable: o.Durable, Logger: o.Logger}); err != nil {
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
	held, err := collectEnvelopes(ctx, js, o.Stream, pos, want)
	if err != nil {
		return nil, err
	}
	body := FleetBody{
		Format: FleetFormat, Kind: FleetKind, Operator: o.Key.ID(),
		Status: FleetStatus{GeneratedUnixMs: o.Now().UnixMilli(), Harness: o.Harness, Stream: o.Stream,
			StreamSeq: pos, Messages: vr.Messages, Trusted: len(o.Trusted)},
		Boards: []FleetBoard{}, Problems: []string{},
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
	payload, err := cbor.Marshal(api.Attestation{Purpose: FleetPurpose, SHA256: sum[:], Steward: o.Key.ID(), SealedMs: uint64(o.Now().UnixMilli())})
	if err != nil {
		return nil, fmt.Errorf("fleet report: attestation: %w", err)
	}
	env, err := steward.Sign1(o.Key, payload)
	if err != nil {
		return nil, fmt.Errorf("fleet report: signing: %w", err)
	}
	rep := &FleetReport{Body: body, Attestation: base64.StdEncoding.EncodeToString(env)}
	data, err := EncodeFleet(rep)
	if err != nil {
		return nil, err
	}
	if _, problems := VerifyFleet(data, o.Key.Public()); len(problems) > 0 {
		return nil, fmt.Errorf("fleet report: the report made does not verify (a bug): %s", problems[0])
	}
	return rep, nil
}

// boardSegment is a verified steward's segment: its receipts from 0 to the
// newest checkpoint the verifier matched, and that checkpoint.
func boardSegment(s fleet.StewardReport, held *collected) (FleetBoard, []*steward.Opened, error) {
	if held == nil {
		return FleetBoard{}, nil, errors.New("its messages are no longer in the stream")
	}
	key, err := steward.ParsePublicKey(s.Steward)
	if err != nil {
		return FleetBoard{}, nil, err
	}
	ch := Chain{First: 0, Envelopes: make([]string, 0, s.Checkpoint)}
	for seq := uint64(0); seq < s.Checkpoint; seq++ {
		env, ok := held.receipts[seq]
		if !ok {
			return FleetBoard{}, nil, fmt.Errorf("receipt %d is no longer in the stream (expired or purged since it was verified)", seq)
		}
		ch.Envelopes = append(ch.Envelopes, base64.StdEncoding.EncodeToString(env))
	}
	cp, ok := held.checkpoints[s.Checkpoint]
	if !ok {
		return FleetBoard{}, nil, fmt.Errorf("its checkpoint of %d receipts is no longer in the stream", s.Checkpoint)
	}
	ch.Checkpoint = base64.StdEncoding.EncodeToString(cp)
	// Opened again here, by the code verify runs: what the verifier
	// accepted from the stream and what the report holds must agree.
	_, list, err := openSegment(ch, key)
	if err != nil {
		return FleetBoard{}, nil, err
	}
	if _, err := checkAnchor(ch, list, key); err != nil {
		return FleetBoard{}, nil, fmt.Errorf("checkpoint: %w", err)
	}
	return FleetBoard{Steward: s.Steward, Chain: ch, Unanchored: s.Count - s.Checkpoint}, list, nil
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

// EncodeFleet is the report file: its canonical JSON and a newline.
func EncodeFleet(r *FleetReport) ([]byte, error) { return encodeFile(r) }

// DecodeFleet reads a fleet report strictly, as Decode a bench report.
func DecodeFleet(data []byte) (*FleetReport, error) {
	var r FleetReport
	if err := decodeStrict(data, &r, "a fleet report"); err != nil {
		return nil, err
	}
	return &r, nil
}

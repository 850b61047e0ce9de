package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/fleet"
	"meshd/bench"
	"meshd/cmd/internal/cli"
	"meshd/rag"
	"meshd/steward"
	"meshd/wire"
)

// board is one steward's log for a fleet report test.
type board struct {
	t   *testing.T
	key *steward.Key
	log *steward.Log
	st  *steward.Steward
}

func newBoard(t *testing.T) *board {
	t.Helper()
	k, err := steward.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := steward.OpenLog(context.Background(), filepath.Join(t.TempDir(), "r"), steward.LogOptions{Key: k, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return &board{t: t, key: k, log: l, st: steward.New(k, l, steward.Options{})}
}

func (b *board) id() string { return b.key.ID() }

// seal seals d and returns the receipt.
func (b *board) seal(d steward.Draft) *steward.Sealed {
	b.t.Helper()
	s, err := b.st.Seal(context.Background(), d)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// publish publishes receipts from..to-1 and, when withCheckpoint, the
// log's checkpoint of them, as the board's publisher does.
func (b *board) publish(js jetstream.JetStream, seqs []uint64, withCheckpoint bool) {
	b.t.Helper()
	ctx := context.Background()
	for _, s := range seqs {
		envs, err := b.log.Range(ctx, s, 1)
		if err != nil {
			b.t.Fatal(err)
		}
		publish(b.t, js, fleet.ReceiptMsg(b.id(), s, envs[0]))
	}
	if withCheckpoint {
		cp, err := b.log.Checkpoint(ctx)
		if err != nil {
			b.t.Fatal(err)
		}
		publish(b.t, js, fleet.CheckpointMsg(b.id(), cp.Count, cp.Envelope))
	}
}

// shuntDraft is a HwShunt serve of 2 accepted tokens charged uj ± 25 µJ.
func shuntDraft(req string, uj uint64) steward.Draft {
	d := hwDraft(0)
	d.Request, d.Backend = wire.ContentOf([]byte(req)), "ref"
	d.Energy = wire.Measured(uj, uj)
	return d
}

func seqs(from, to uint64) []uint64 {
	var out []uint64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// fleetFixture publishes a small fleet: two metered boards running the
// same backend and recipe at different µJ/token, a front door that
// forwarded two of the first board's serves, a board with a gap and one
// whose receipts no checkpoint anchors yet. It returns the NATS URL, the
// boards and the operator key file.
func fleetFixture(t *testing.T) (url string, a, b, front, gap, unanchored *board, keyFile string) {
	t.Helper()
	url, js := fleetServer(t)
	a, b, front, gap, unanchored = newBoard(t), newBoard(t), newBoard(t), newBoard(t), newBoard(t)
	var upstream []*steward.Sealed
	for i := range 5 {
		upstream = append(upstream, a.seal(shuntDraft(fmt.Sprint("a", i), 5000+uint64(i))))
		b.seal(shuntDraft(fmt.Sprint("b", i), 9000+uint64(i)))
		gap.seal(shuntDraft(fmt.Sprint("g", i), 7000))
		unanchored.seal(shuntDraft(fmt.Sprint("u", i), 7000))
	}
	for _, up := range upstream[:2] {
		r := up.Receipt
		d := shuntDraft("", *r.MeasuredUJ)
		d.Request, _ = wire.ParseContentID(r.RequestID)
		d.Backend, d.Recipe = "node-a", r.Recipe
		d.Upstream = &steward.Upstream{Receipt: up.ID, Steward: a.key.Public()}
		front.seal(d)
	}
	a.publish(js, seqs(0, 5), true)
	b.publish(js, seqs(0, 5), true)
	front.publish(js, seqs(0, 2), true)
	gap.publish(js, []uint64{0, 1, 3, 4}, true)
	unanchored.publish(js, seqs(0, 5), false)
	// A receipt past the first board's checkpoint: verified, left for a
	// later report.
	a.seal(shuntDraft("a-late", 5000))
	a.publish(js, []uint64{5}, false)
	op, err := steward.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	keyFile = filepath.Join(t.TempDir(), "operator.key")
	if err := steward.WriteKeyFile(keyFile, op); err != nil {
		t.Fatal(err)
	}
	return url, a, b, front, gap, unanchored, keyFile
}

// TestFleetReportVerifiesAndCompares makes a report from a fleet with
// problems and checks that it keeps only the chains that verify, lists
// the rest, verifies with bench verify under the operator's key, and is
// ranked by bench compare board against board.
func TestFleetReportVerifiesAndCompares(t *testing.T) {
	url, a, b, front, gap, unanchored, keyFile := fleetFixture(t)
	path := filepath.Join(t.TempDir(), "fleet.json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, errOut, err := meshctl(ctx, "fleet", "report", "-url", url, "-key", keyFile, "-o", path)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 {
		t.Fatalf("fleet report over a fleet with problems: %v, want exit 1\n%s%s", err, out, errOut)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the report was not written: %v\n%s%s", err, out, errOut)
	}
	rep, err := bench.DecodeFleet(data)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, bd := range rep.Body.Boards {
		got = append(got, bd.Steward)
	}
	want := []string{a.id(), b.id(), front.id()}
	for _, w := range want {
		if !strings.Contains(strings.Join(got, " "), w) {
			t.Errorf("board %s is not in the report (boards %v)", w, got)
		}
	}
	if len(got) != 3 {
		t.Errorf("report boards %v, want only the three whose chains verify", got)
	}
	problems := strings.Join(rep.Body.Problems, "\n")
	for _, w := range []string{
		"steward " + gap.id() + ": left out: its chain does not verify",
		"sequence 2 missing",
		"steward " + unanchored.id() + ": left out: no published checkpoint matches its 5 verified receipts",
	} {
		if !strings.Contains(problems, w) {
			t.Errorf("problems lack %q:\n%s", w, problems)
		}
	}
	for _, bd := range rep.Body.Boards {
		if bd.Steward == a.id() && (len(bd.Chain.Envelopes) != 5 || bd.Unanchored != 1) {
			t.Errorf("board a: %d envelopes, %d unanchored; want 5 anchored and 1 left for later", len(bd.Chain.Envelopes), bd.Unanchored)
		}
	}
	// Cells: one per steward, backend and recipe; the front door's names
	// the backend it forwarded to and counts the forwarded receipts.
	cells := map[string]bench.FleetCell{}
	for _, c := range rep.Body.Summary.Cells {
		cells[c.Steward+" "+c.Backend] = c
	}
	if c := cells[a.id()+" ref"]; c.Serves != 5 || c.Gross == nil || c.Gross.Median != 2501_000 || c.GrossMedianBound == nil || c.Provenance["HwShunt"] != 5 {
		t.Errorf("board a's cell: %+v", c)
	}
	if c := cells[front.id()+" node-a"]; c.Forwarded != 2 || c.Serves != 2 || c.Recipe != "r" {
		t.Errorf("front door's cell: %+v", c)
	}
	if c := cells[a.id()+" ref"]; c.PromptWords != 0 || bytes.Contains(data, []byte(`"prompt_words"`)) {
		t.Error("a fleet cell carries a bench cell's prompt_words")
	}

	op, err := steward.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	vout, _, err := meshctl(ctx, "bench", "verify", "-trust", op.ID(), path)
	if err != nil {
		t.Fatalf("bench verify of the fleet report: %v\n%s", err, vout)
	}
	for _, w := range []string{"3 boards", "forwarded: 2 receipts, 2 checked against their upstream receipt", "every figure recomputed", "attestation: meshd-fleet-report/v1 signed by the operator", "listed by the operator: steward " + gap.id(), "OK"} {
		if !strings.Contains(vout, w) {
			t.Errorf("bench verify output lacks %q:\n%s", w, vout)
		}
	}
	other, _ := steward.GenerateKey(nil)
	if vout, _, err := meshctl(ctx, "bench", "verify", "-trust", other.ID(), path); err == nil || !strings.Contains(vout, "operator: the report is signed by "+op.ID()) {
		t.Errorf("verify under another operator key: %v\n%s", err, vout)
	}

	cout, _, err := meshctl(ctx, "bench", "compare", path)
	if err != nil {
		t.Fatalf("bench compare of the fleet report: %v\n%s", err, cout)
	}
	wantVerdict := fmt.Sprintf("ref/r: fleet@%s vs fleet@%s: fleet@%s uses less: 2501 vs 4501 µJ/token", a.id()[:8], b.id()[:8], a.id()[:8])
	if !strings.Contains(cout, wantVerdict) {
		t.Errorf("compare lacks %q:\n%s", wantVerdict, cout)
	}
	// plot and csv draw a bench run; a fleet report is refused by name.
	if _, _, err := meshctl(ctx, "bench", "plot", "-o", t.TempDir(), path); err == nil || !strings.Contains(err.Error(), "is a fleet report") {
		t.Errorf("bench plot of a fleet report: %v", err)
	}
}

// TestFleetReportVerifyNamesTheAlteredPlace alters a fleet report byte by
// byte and checks that verify names where.
func TestFleetReportVerifyNamesTheAlteredPlace(t *testing.T) {
	url, _, _, _, _, _, keyFile := fleetFixture(t)
	path := filepath.Join(t.TempDir(), "fleet.json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := meshctl(ctx, "fleet", "report", "-url", url, "-key", keyFile, "-o", path); err == nil {
		t.Fatal("fleet report over a fleet with problems exited 0")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.DecodeFleet(data)
	if err != nil {
		t.Fatal(err)
	}
	// A board with five receipts (steward order is random: the front door
	// has two).
	bi := slices.IndexFunc(rep.Body.Boards, func(b bench.FleetBoard) bool { return len(b.Chain.Envelopes) == 5 })
	if bi < 0 {
		t.Fatal("no board with five receipts")
	}
	env2 := rep.Body.Boards[bi].Chain.Envelopes[2]
	board1 := fmt.Sprintf("boards[%d] (steward %s)", bi, bench.ShortID(rep.Body.Boards[bi].Steward))

	// An attestation by the operator for another purpose.
	op, err := steward.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(&rep.Body)
	c, _ := rag.Canonical(raw)
	resigned := *rep
	payload, _ := cbor.Marshal(api.Attestation{Purpose: "meshd-bench-report/v1", SHA256: sha256Of(c), Steward: op.ID(), SealedMs: 1})
	env, _ := steward.Sign1(op, payload)
	resigned.Attestation = base64.StdEncoding.EncodeToString(env)
	wrongPurpose, _ := bench.EncodeFleet(&resigned)

	for _, tc := range []struct {
		name  string
		data  []byte
		place string
	}{
		{"an envelope", apitest.Alter(t, data, env2, env2[:40], 0), board1 + " chain.envelopes[2] (receipt sequence 2)"},
		{"a checkpoint", apitest.Alter(t, data, rep.Body.Boards[bi].Chain.Checkpoint, "", 30), board1 + " chain.checkpoint:"},
		{"a summary figure", apitest.Alter(t, data, `"summary":{`, `"gross_uj_per_token":{"iqr":`, 0), "summary cell " + bench.ShortID(rep.Body.Summary.Cells[0].Steward)},
		{"the problems", apitest.Alter(t, data, `"problems":["`, `"problems":["`, 3), "problems: the section was altered"},
		{"the status", apitest.Alter(t, data, `"status":{`, `"harness":"`, 1), "status: the section was altered"},
		{"the signature", apitest.Alter(t, data, `"attestation":"`, "", 100), "attestation: the signature does not verify"},
		{"the purpose", wrongPurpose, "attestation: signed for \"meshd-bench-report/v1\""},
		{"the JSON", apitest.Alter(t, data, `"kind":`, "", 0), "file: not a fleet report at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if bytes.Equal(tc.data, data) {
				t.Fatal("nothing was altered")
			}
			_, ps := bench.VerifyFleet(tc.data, nil)
			var problems []string
			for _, p := range ps {
				problems = append(problems, p.String())
			}
			if len(problems) == 0 {
				t.Fatal("an altered report verifies")
			}
			if !strings.HasPrefix(problems[0], tc.place) {
				t.Fatalf("first problem %q, want it to name %q; all:\n%s", problems[0], tc.place, strings.Join(problems, "\n"))
			}
			if !strings.HasPrefix(tc.place, "attestation") && !strings.HasPrefix(tc.place, "file:") &&
				!strings.Contains(strings.Join(problems, "\n"), "attestation:") {
				t.Errorf("the attestation still verifies over an altered body:\n%s", strings.Join(problems, "\n"))
			}
		})
	}
}

func sha256Of(b []byte) []byte {
	s := sha256.Sum256(b)
	return s[:]
}

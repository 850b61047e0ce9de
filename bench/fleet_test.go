package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"meshd/steward"
	"meshd/wire"
)

// board is one steward's log.
type board struct {
	t   *testing.T
	key *steward.Key
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
	return &board{t: t, key: k, st: steward.New(k, l, steward.Options{})}
}

// seal seals d and returns the receipt.
func (b *board) seal(d steward.Draft) *steward.Sealed {
	b.t.Helper()
	s, err := b.st.Seal(context.Background(), d)
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// shuntDraft is a HwShunt serve of 2 accepted tokens charged uj ± 25 µJ,
// its evidence consistent (10 ms window, 9 samples at 1.111 ms).
func shuntDraft(req string, uj uint64) steward.Draft {
	return steward.Draft{
		Request: wire.ContentOf([]byte(req)), Backend: "ref", Recipe: "r", Route: "why",
		Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Measured(uj, uj),
		Metering: wire.Metering{Meter: "ina226@i2c-1:0x40", Kind: wire.KindADC, WindowNs: 10_000_000, ServeNs: 9_500_000,
			ErrorUJ: 25, Samples: 10, MaxGapNs: 1_100_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 5_000, Shared: 1, FullScaleUW: 10_000_000},
	}
}

// TestFleetPairMismatch checks the pair check names each way a forwarded
// receipt can disagree with its upstream receipt.
func TestFleetPairMismatch(t *testing.T) {
	a, front := newBoard(t), newBoard(t)
	up := a.seal(shuntDraft("q", 5000))
	opened, err := steward.OpenEnvelope(up.Envelope, a.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	forward := func(mut func(*steward.Draft)) *steward.Receipt {
		d := shuntDraft("q", 5000)
		d.Backend = "node-a"
		d.Upstream = &steward.Upstream{Receipt: up.ID, Steward: a.key.Public()}
		if mut != nil {
			mut(&d)
		}
		return front.seal(d).Receipt
	}
	if d := pairMismatch(forward(nil), opened); d != "" {
		t.Fatalf("a faithful forward: %s", d)
	}
	for _, tc := range []struct {
		name string
		mut  func(*steward.Draft)
		want string
	}{
		{"request", func(d *steward.Draft) { d.Request = wire.ContentOf([]byte("other")) }, "answers request"},
		{"recipe", func(d *steward.Draft) { d.Recipe = "other" }, "names recipe r, this one other"},
		{"tokens", func(d *steward.Draft) { d.Outcome.TokensOut = 3 }, "counts 0/2/2 tokens"},
		{"energy", func(d *steward.Draft) { d.Energy = wire.Measured(6000, 6000) }, "charges 5000 µJ (HwShunt), this one 6000 µJ"},
		{"steward", func(d *steward.Draft) { d.Upstream.Steward = front.key.Public() }, "not the x_upstream_steward named"},
	} {
		if got := pairMismatch(forward(tc.mut), opened); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

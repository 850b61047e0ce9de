package grant_test

import (
	"errors"
	"strings"
	"testing"

	"meshd/steward"
	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

// In the steward's own log a receipt carries grant_id, x_grant_hold and
// x_grant_debit_uj together or not at all; anything else cannot be
// reconciled with the ledger and is refused, naming the receipt.
func TestChargeOf(t *testing.T) {
	g := wire.ContentOf([]byte("a grant"))
	id := g.String()
	hold, debit := uint64(7), uint64(12_000)
	tests := []struct {
		name    string
		grantID *string
		hold    *uint64
		debit   *uint64
		want    *ledger.Charge // nil: ungranted, or refused when says != ""
		says    string
	}{
		{name: "ungranted"},
		{name: "granted", grantID: &id, hold: &hold, debit: &debit,
			want: &ledger.Charge{Grant: g, Hold: hold, ChargedUJ: debit, Sequence: 3}},
		{name: "grant without hold", grantID: &id, debit: &debit, says: "names grant " + id + " without"},
		{name: "grant without debit", grantID: &id, hold: &hold, says: "names grant " + id + " without"},
		{name: "grant alone", grantID: &id, says: "names grant " + id + " without"},
		{name: "hold without grant", hold: &hold, debit: &debit, says: "no grant_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &steward.Receipt{Sequence: 3, GrantID: tc.grantID, GrantHold: tc.hold, GrantDebitUJ: tc.debit}
			ch, ok, err := grant.ChargeOf(r)
			if tc.says != "" {
				if ok || !errors.Is(err, ledger.ErrMismatch) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "receipt 3") {
					t.Fatalf("ChargeOf: %+v, %v, %v; want ErrMismatch naming receipt 3 and saying %q", ch, ok, err, tc.says)
				}
				// The Collector refuses the log on such a receipt.
				var c grant.Collector
				if err := c.Visit(&steward.Opened{Receipt: r}); !errors.Is(err, ledger.ErrMismatch) || len(c.Charges()) != 0 {
					t.Fatalf("Collector.Visit: %v, %d charges", err, len(c.Charges()))
				}
				return
			}
			if err != nil || ok != (tc.want != nil) || (tc.want != nil && ch != *tc.want) {
				t.Fatalf("ChargeOf: %+v, %v, %v; want %+v", ch, ok, err, tc.want)
			}
			var c grant.Collector
			if err := c.Visit(&steward.Opened{Receipt: r}); err != nil || len(c.Charges()) != btoi(ok) {
				t.Fatalf("Collector.Visit: %v, %d charges", err, len(c.Charges()))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

package ledger

import (
	"fmt"

	"meshd/steward"
	"meshd/wire"
)

// Collector gathers the grant debits of a receipt log as it is opened or
// verified; pass its Visit as steward.LogOptions.Visit and its Charges to
// Open.
type Collector struct {
	charges []Charge
}

// Visit records the debit of one verified receipt, if it has one. A receipt
// that names a grant without the hold it settled cannot be reconciled and
// is refused.
func (c *Collector) Visit(o *steward.Opened) error {
	ch, ok, err := ChargeOf(o.Receipt)
	if err != nil || !ok {
		return err
	}
	c.charges = append(c.charges, ch)
	return nil
}

// Charges returns what Visit gathered, in log order.
func (c *Collector) Charges() []Charge { return c.charges }

// ChargeOf returns the grant debit a receipt states: its grant_id, its
// x_grant_hold and its x_grant_debit_uj (the charged figure capped at the
// hold). ok is false for an ungranted receipt.
func ChargeOf(r *steward.Receipt) (ch Charge, ok bool, err error) {
	if r.GrantID == nil && r.GrantHold == nil && r.GrantDebitUJ == nil {
		return Charge{}, false, nil
	}
	if r.GrantID == nil || r.GrantHold == nil || r.GrantDebitUJ == nil {
		return Charge{}, false, fmt.Errorf("%w: receipt %d carries only some of grant_id, x_grant_hold and x_grant_debit_uj", ErrMismatch, r.Sequence)
	}
	g, err := wire.ParseContentID(*r.GrantID)
	if err != nil {
		return Charge{}, false, fmt.Errorf("receipt %d: grant_id: %w", r.Sequence, err)
	}
	return Charge{Grant: g, Hold: *r.GrantHold, ChargedUJ: *r.GrantDebitUJ, Sequence: r.Sequence}, true, nil
}

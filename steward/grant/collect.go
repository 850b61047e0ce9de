package grant

import (
	"fmt"

	"meshd/steward"
	"meshd/steward/ledger"
	"meshd/wire"
)

// Collector gathers the grant debits of a steward's own receipt log as it
// is opened or verified, for ledger.Open to reconcile against: pass its
// Visit as steward.LogOptions.Visit and its Charges to ledger.Open. It
// lives here rather than in the ledger so that the ledger, which knows only
// grant ids and numbers, does not depend on the receipt format.
type Collector struct {
	charges []ledger.Charge
}

// Visit records the debit of one verified receipt, if it has one. A receipt
// that names a grant without the hold it settled is refused (see ChargeOf).
func (c *Collector) Visit(o *steward.Opened) error {
	ch, ok, err := ChargeOf(o.Receipt)
	if err != nil || !ok {
		return err
	}
	c.charges = append(c.charges, ch)
	return nil
}

// Charges returns what Visit gathered, in log order.
func (c *Collector) Charges() []ledger.Charge { return c.charges }

// ChargeOf returns the grant debit a receipt of this steward's own log
// states: its grant_id, its x_grant_hold and its x_grant_debit_uj (the
// charged figure capped at the hold). ok is false for an ungranted receipt.
//
// It is strict because meshd seals all three fields or none: in its own log
// a receipt with only some of them cannot be reconciled with the ledger,
// and guessing would risk charging a grant twice or not at all, so it is
// refused wrapping ledger.ErrMismatch. (A receipt from another
// implementation may name a grant_id without meshd's extensions; verifying
// such a receipt is not this function's business.)
func ChargeOf(r *steward.Receipt) (ch ledger.Charge, ok bool, err error) {
	if r.GrantID == nil && r.GrantHold == nil && r.GrantDebitUJ == nil {
		return ledger.Charge{}, false, nil
	}
	switch {
	case r.GrantID == nil:
		return ledger.Charge{}, false, fmt.Errorf("%w: receipt %d carries x_grant_hold or x_grant_debit_uj but no grant_id", ledger.ErrMismatch, r.Sequence)
	case r.GrantHold == nil || r.GrantDebitUJ == nil:
		return ledger.Charge{}, false, fmt.Errorf("%w: receipt %d names grant %s without both x_grant_hold and x_grant_debit_uj, "+
			"so the ledger cannot tell which hold it settled or for how much", ledger.ErrMismatch, r.Sequence, *r.GrantID)
	}
	g, err := wire.ParseContentID(*r.GrantID)
	if err != nil {
		return ledger.Charge{}, false, fmt.Errorf("receipt %d: grant_id: %w", r.Sequence, err)
	}
	return ledger.Charge{Grant: g, Hold: *r.GrantHold, ChargedUJ: *r.GrantDebitUJ, Sequence: r.Sequence}, true, nil
}

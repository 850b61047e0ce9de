package grant

import (
	"context"
	"fmt"

	"meshd/steward"
	"meshd/steward/ledger"
	"meshd/wire"
)

// Stores is a steward's durable state opened together: the receipt log
// and the grant ledger reconciled with it.
type Stores struct {
	Log      *steward.Log
	Scan     *steward.ScanReport
	Ledger   *ledger.Ledger
	Recovery *ledger.Recovery
}

// OpenStores opens the receipt log at logDir (signed by key) and the grant
// ledger at ledgerPath, and reconciles them. The ledger's snapshot is tied
// to a log position (its anchor): the log is opened from a checkpoint no
// later than the anchor, so every receipt the snapshot does not reflect is
// seen, and the anchor's head is checked against the log. The ledger
// compacts itself against the log's checkpoints (lopt and gopt are used
// as given, except for the fields this sets: Key, Visit and VisitFrom;
// Anchor).
func OpenStores(ctx context.Context, logDir, ledgerPath string, key *steward.Key, lopt steward.LogOptions, gopt ledger.Options) (*Stores, error) {
	anchor, snap, err := ledger.ReadAnchor(ledgerPath)
	if err != nil {
		return nil, fmt.Errorf("open stores: %w", err)
	}
	from := uint64(0)
	if snap {
		from = anchor.Count
	}
	var col Collector
	lopt.Key, lopt.VisitFrom = key, &from
	lopt.Visit = func(o *steward.Opened) error {
		if snap && anchor.Count > 0 && o.Receipt.Sequence == anchor.Count-1 && o.ID != anchor.Head {
			return fmt.Errorf("%w: the ledger snapshot is anchored at receipt %s, the log holds %s there", ledger.ErrMismatch, anchor.Head, o.ID)
		}
		return col.Visit(o)
	}
	log, rep, err := steward.OpenLog(ctx, logDir, lopt)
	if err != nil {
		return nil, fmt.Errorf("open stores: %w", err)
	}
	fail := func(err error) (*Stores, error) {
		log.Close()
		return nil, fmt.Errorf("open stores: %w", err)
	}
	if snap && anchor.Count > rep.Records {
		return fail(fmt.Errorf("%w: the ledger snapshot is anchored at %d receipts, the log holds %d", ledger.ErrMismatch, anchor.Count, rep.Records))
	}
	if snap && anchor.Count > 0 && rep.From != nil && rep.From.Count == anchor.Count && rep.From.HeadID != anchor.Head {
		return fail(fmt.Errorf("%w: the ledger snapshot is anchored at receipt %s, the log's checkpoint there names %s", ledger.ErrMismatch, anchor.Head, rep.From.HeadID))
	}
	gopt.Anchor = func() (ledger.Anchor, error) {
		// The checkpoint makes the log durable up to its head first, and
		// fails if the log's writer has failed.
		cp, err := log.Checkpoint(ctx)
		if err != nil || cp == nil {
			return ledger.Anchor{Count: 0, Head: wire.ContentID{}}, err
		}
		return ledger.Anchor{Count: cp.Count, Head: cp.HeadID}, nil
	}
	led, rec, err := ledger.Open(ledgerPath, col.Charges(), gopt)
	if err != nil {
		return fail(err)
	}
	return &Stores{Log: log, Scan: rep, Ledger: led, Recovery: rec}, nil
}

// Close closes the ledger and then the log.
func (s *Stores) Close() error {
	err := s.Ledger.Close()
	if lerr := s.Log.Close(); err == nil {
		err = lerr
	}
	return err
}

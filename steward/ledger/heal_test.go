package ledger

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"meshd/steward/internal/framelog"
)

// A hold the storage refuses is not granted, the ledger refuses holds
// until the storage takes writes again and then heals by itself, and the
// file it leaves replays to the balances it reported: an account whose
// opening record the failure lost is opened again by the next hold, never
// referenced without one.
func TestLedgerHealsAfterStorageFailure(t *testing.T) {
	for _, f := range []framelog.Fault{{Err: syscall.ENOSPC}, {Err: syscall.ENOSPC, Short: 30}, {Err: syscall.EIO, Short: 1 << 10}} {
		t.Run(f.Err.Error(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger")
			var x framelog.Faults
			l, _, err := Open(path, nil, Options{files: x.Wrap})
			if err != nil {
				t.Fatal(err)
			}
			a, b := gid(1), gid(2)
			h1, err := l.Hold(ctx, a, 1000, 100)
			if err != nil {
				t.Fatal(err)
			}
			x.Down(f)
			if _, err := l.Hold(ctx, b, 500, 50); !errors.Is(err, ErrStorage) {
				t.Fatalf("hold on a new grant while the storage refuses: %v", err)
			}
			if _, ok := l.Balance(b); ok {
				t.Fatal("a grant whose opening was refused has an account")
			}
			if _, err := l.Hold(ctx, a, 1000, 10); !errors.Is(err, ErrStorage) {
				t.Fatalf("hold while the storage refuses: %v", err)
			}
			if err := l.Storage(); !errors.Is(err, ErrStorage) || !errors.Is(err, f.Err) {
				t.Fatalf("Storage while refusing: %v", err)
			}
			// A settlement while failed stays in memory; the receipt
			// rebuilds it on reopen.
			if err := l.Settle(h1, 80); err != nil {
				t.Fatal(err)
			}
			x.Up()
			if err := l.Storage(); err != nil {
				t.Fatalf("Storage once writes succeed: %v", err)
			}
			h2, err := l.Hold(ctx, b, 500, 50)
			if err != nil {
				t.Fatalf("hold after healing: %v", err)
			}
			if h2 <= h1+1 {
				// The refused hold's number is never given again: no receipt
				// can name it, but none may be mistaken for it either.
				t.Fatalf("hold after healing is %d; the refused hold had %d", h2, h1+1)
			}
			if err := l.Settle(h2, 40); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			charges := []Charge{{Grant: a, Hold: h1, ChargedUJ: 80, Sequence: 0}, {Grant: b, Hold: h2, ChargedUJ: 40, Sequence: 1}}
			l2, rec := open(t, path, charges)
			defer l2.Close()
			if rec.TornBytes != 0 {
				t.Fatalf("reopen cut %d torn bytes", rec.TornBytes)
			}
			if ba, bb := balance(t, l2, a), balance(t, l2, b); ba.SpentUJ != 80 || ba.HeldUJ != 0 || bb.SpentUJ != 40 || bb.BudgetUJ != 500 {
				t.Fatalf("balances after reopen: a %+v, b %+v", ba, bb)
			}
		})
	}
}

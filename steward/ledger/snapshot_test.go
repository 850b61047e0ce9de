package ledger

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/wire"
)

// receipts stands in for the receipt log: a serve seals its receipt while
// its hold is open, then settles the hold.
type receipts struct {
	mu      sync.Mutex
	charges []Charge
	anchors int
}

func (r *receipts) seal(g wire.ContentID, hold, charged uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charges = append(r.charges, Charge{Grant: g, Hold: hold, ChargedUJ: charged, Sequence: uint64(len(r.charges))})
}

func head(n uint64) wire.ContentID { return wire.ContentOf([]byte(fmt.Sprint("receipt", n))) }

func (r *receipts) anchor() (Anchor, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.anchors++
	n := uint64(len(r.charges))
	return Anchor{Count: n, Head: head(n)}, nil
}

func (r *receipts) all() []Charge {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Charge(nil), r.charges...)
}

func (r *receipts) serve(t testing.TB, l *Ledger, g wire.ContentID, budget, amount, charged uint64) {
	t.Helper()
	h, err := l.Hold(ctx, g, budget, amount)
	if err != nil {
		t.Fatal(err)
	}
	r.seal(g, h, charged)
	if err := l.Settle(h, charged); err != nil {
		t.Fatal(err)
	}
}

// crashCopy copies the ledger file as a crash would leave it, to a fresh
// path (the original stays locked by its open Ledger).
func crashCopy(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "ledger")
	if err := os.WriteFile(cp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return cp
}

func snapshotSize(accounts, holds int) int64 {
	const h = 12 // frame header
	return int64(len(format.Magic) + accounts*(h+sizeSnapAcct) + holds*(h+sizeSnapHold) + h + sizeSnapEnd)
}

func TestSnapshot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _, err := Open(path, nil, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var log receipts
	grants := []wire.ContentID{gid(1), gid(2), gid(3)}
	for i := 0; i < 300; i++ {
		log.serve(t, l, grants[i%3], 1<<40, 100, uint64(i%50+1))
	}
	want := map[wire.ContentID]Balance{}
	for _, g := range grants {
		want[g] = balance(t, l, g)
	}
	before := size(t, path)
	ok, err := l.Compact(log.anchor)
	if !ok || err != nil {
		t.Fatalf("compact: %v, %v", ok, err)
	}
	if got := size(t, path); got != snapshotSize(3, 0) || got >= before {
		t.Fatalf("compacted file is %d bytes (was %d), want %d", got, before, snapshotSize(3, 0))
	}
	anchor := Anchor{Count: 300, Head: head(300)}
	if a, ok, err := ReadAnchor(path); !ok || err != nil || a != anchor {
		t.Fatalf("ReadAnchor while open: %+v, %v, %v; want %+v", a, ok, err, anchor)
	}
	for _, g := range grants {
		if got := balance(t, l, g); got != want[g] {
			t.Fatalf("compaction changed grant %s: %+v, want %+v", g, got, want[g])
		}
	}

	// After the snapshot: hold a has its receipt sealed but the serve
	// crashed before settling; hold b has no receipt; serve c completed.
	a, err := l.Hold(ctx, gid(1), 1<<40, 500)
	if err != nil {
		t.Fatal(err)
	}
	log.seal(gid(1), a, 321)
	if _, err := l.Hold(ctx, gid(2), 1<<40, 500); err != nil {
		t.Fatal(err)
	}
	log.serve(t, l, gid(3), 1<<40, 100, 9)
	crash := crashCopy(t, path)
	first := log.all()[0]

	// Every charge is handed over; those below the anchor name holds the
	// file no longer has, and must be skipped, not refused.
	c, rec := open(t, crash, log.all())
	if rec.Anchor == nil || *rec.Anchor != anchor {
		t.Fatalf("recovery anchor %v, want %+v", rec.Anchor, anchor)
	}
	if rec.Settled != 1 || rec.Released != 1 || rec.Corrected != 0 {
		t.Fatalf("recovery %+v, want hold %d settled from its receipt and one released", rec, a)
	}
	if rec.Records != 3+1+4 {
		t.Fatalf("replayed %d records, want 4 of snapshot and 4 after it", rec.Records)
	}
	want[gid(1)] = Balance{BudgetUJ: 1 << 40, SpentUJ: want[gid(1)].SpentUJ + 321, RemainingUJ: 1<<40 - want[gid(1)].SpentUJ - 321}
	want[gid(3)] = Balance{BudgetUJ: 1 << 40, SpentUJ: want[gid(3)].SpentUJ + 9, RemainingUJ: 1<<40 - want[gid(3)].SpentUJ - 9}
	for _, g := range grants {
		if got := balance(t, c, g); got != want[g] {
			t.Errorf("after recovery grant %s: %+v, want %+v", g, got, want[g])
		}
	}
	if n := len(c.holds); n != 0 {
		t.Errorf("%d holds in memory after recovery, want 0", n)
	}
	c.Close()

	// A receipt at or past the anchor that names a hold from before the
	// snapshot cannot be reconciled: the pair does not belong together.
	crash2 := crashCopy(t, path)
	stale := first
	stale.Sequence = anchor.Count
	if _, _, err := Open(crash2, []Charge{stale}, Options{}); !errors.Is(err, ErrMismatch) {
		t.Fatalf("open with a post-anchor receipt for a pre-snapshot hold: %v, want ErrMismatch", err)
	}
}

func TestCompactRefusesOpenHold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _ := open(t, path, nil)
	defer l.Close()
	var log receipts
	log.serve(t, l, gid(1), 1000, 10, 5)
	h, err := l.Hold(ctx, gid(1), 1000, 10)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if ok, err := l.Compact(log.anchor); ok || err != nil {
		t.Fatalf("compact with a hold open: %v, %v; want false, nil", ok, err)
	}
	if log.anchors != 0 {
		t.Fatal("compact asked for an anchor with a hold open")
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused compaction changed the file")
	}
	l.Release(h)
	if ok, err := l.Compact(log.anchor); !ok || err != nil {
		t.Fatalf("compact with no hold open: %v, %v", ok, err)
	}
	l.Close()
	if _, err := l.Compact(log.anchor); !errors.Is(err, ErrClosed) {
		t.Fatalf("compact after close: %v, want ErrClosed", err)
	}
}

// TestSnapshotOpenHolds: a snapshot taken with holds open (only internal
// callers can) records them, and recovery treats them like any open hold.
func TestSnapshotOpenHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _ := open(t, path, nil)
	defer l.Close()
	var log receipts
	log.serve(t, l, gid(1), 1000, 10, 5)
	a, _ := l.Hold(ctx, gid(1), 1000, 100)
	b, _ := l.Hold(ctx, gid(2), 1000, 200)
	l.mu.Lock()
	err := l.compactLocked(log.anchor)
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if got := size(t, path); got != snapshotSize(2, 2) {
		t.Fatalf("snapshot is %d bytes, want %d", got, snapshotSize(2, 2))
	}
	log.seal(gid(1), a, 60) // sealed after the anchor, never settled
	crash := crashCopy(t, path)
	c, rec := open(t, crash, log.all())
	defer c.Close()
	if rec.Settled != 1 || rec.Released != 1 {
		t.Fatalf("recovery %+v, want hold %d settled and hold %d released", rec, a, b)
	}
	if got := balance(t, c, gid(1)); got.SpentUJ != 65 || got.HeldUJ != 0 {
		t.Fatalf("grant 1: %+v, want spent 65", got)
	}
	if got := balance(t, c, gid(2)); got.SpentUJ != 0 || got.HeldUJ != 0 || got.RemainingUJ != 1000 {
		t.Fatalf("grant 2: %+v, want nothing spent or held", got)
	}
	if h, err := c.Hold(ctx, gid(1), 1000, 1); err != nil || h <= b {
		t.Fatalf("hold after recovery: %d, %v; want a number above %d", h, err, b)
	}
}

func TestCompactCrash(t *testing.T) {
	var log receipts
	build := func(t *testing.T) (string, *Ledger) {
		path := filepath.Join(t.TempDir(), "ledger")
		l, _ := open(t, path, nil)
		for i := 0; i < 20; i++ {
			log.serve(t, l, gid(byte(i%2)), 1000, 10, uint64(i))
		}
		return path, l
	}
	want := func(t *testing.T, l *Ledger) {
		t.Helper()
		for g, spent := range map[byte]uint64{0: 90, 1: 100} {
			if got := balance(t, l, gid(g)); got.SpentUJ != spent || got.HeldUJ != 0 {
				t.Errorf("grant %d: %+v, want spent %d", g, got, spent)
			}
		}
	}
	t.Run("snapshot written, not renamed", func(t *testing.T) {
		log = receipts{}
		path, l := build(t)
		l.Close()
		before, _ := os.ReadFile(path)
		// A half-written snapshot beside the ledger.
		tmp := filepath.Join(filepath.Dir(path), tempPrefix("ledger")+"123")
		if err := os.WriteFile(tmp, []byte(format.Magic+"\x00\x00"), 0o600); err != nil {
			t.Fatal(err)
		}
		l, rec := open(t, path, log.all())
		defer l.Close()
		if rec.Anchor != nil || rec.Settled+rec.Released+rec.Corrected != 0 {
			t.Fatalf("recovery %+v, want the old file as it was", rec)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatal("the ledger changed")
		}
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the abandoned snapshot is still there: %v", err)
		}
		want(t, l)
	})
	t.Run("renamed, directory entry lost", func(t *testing.T) {
		// Until the directory is synced a crash may bring back the old
		// file; nothing was acknowledged on the new one by then, so the
		// old file with the receipts is the same ledger.
		log = receipts{}
		path, l := build(t)
		defer l.Close()
		old := crashCopy(t, path)
		if ok, err := l.Compact(log.anchor); !ok || err != nil {
			t.Fatal(ok, err)
		}
		for _, p := range []string{old, crashCopy(t, path)} {
			c, _ := open(t, p, log.all())
			want(t, c)
			c.Close()
		}
	})
	t.Run("renamed, then appended", func(t *testing.T) {
		log = receipts{}
		path, l := build(t)
		defer l.Close()
		if ok, err := l.Compact(log.anchor); !ok || err != nil {
			t.Fatal(ok, err)
		}
		log.serve(t, l, gid(0), 1000, 10, 7)
		c, rec := open(t, crashCopy(t, path), log.all())
		defer c.Close()
		if rec.Records != 2+1+2 {
			t.Fatalf("replayed %d records, want the 3 of the snapshot and 2 after", rec.Records)
		}
		if got := balance(t, c, gid(0)); got.SpentUJ != 97 {
			t.Fatalf("grant 0: %+v, want spent 97", got)
		}
	})
}

func TestExpiredAccountsLeave(t *testing.T) {
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "ledger")
	l, _, err := Open(path, nil, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var log receipts
	serveUntil := func(l *Ledger, g wire.ContentID, exp time.Time) {
		t.Helper()
		h, err := l.HoldUntil(ctx, g, 1000, exp, 10)
		if err != nil {
			t.Fatal(err)
		}
		log.seal(g, h, 4)
		l.Settle(h, 4)
	}
	long, recent, live, unknown, learnt, held := gid(1), gid(2), gid(3), gid(4), gid(5), gid(6)
	serveUntil(l, long, now.Add(-25*time.Hour))
	serveUntil(l, recent, now.Add(-23*time.Hour))
	serveUntil(l, live, now.Add(time.Hour))
	log.serve(t, l, unknown, 1000, 10, 4)
	log.serve(t, l, learnt, 1000, 10, 4)
	serveUntil(l, learnt, now.Add(time.Hour)) // the account learns its expiry
	openHold, err := l.HoldUntil(ctx, held, 1000, now.Add(-48*time.Hour), 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.HoldUntil(ctx, live, 1000, now.Add(2*time.Hour), 1); !errors.Is(err, ErrMismatch) {
		t.Fatalf("hold with another expiry: %v, want ErrMismatch", err)
	}

	l.mu.Lock() // with a hold open, as only an internal caller may
	err = l.compactLocked(log.anchor)
	l.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Balance(long); ok {
		t.Error("an account expired beyond the grace is still in memory")
	}
	for _, g := range []wire.ContentID{recent, live, unknown, learnt, held} {
		if _, ok := l.Balance(g); !ok {
			t.Errorf("account %s left memory", g)
		}
	}
	if n := l.Stats().Accounts; n != 5 {
		t.Errorf("%d accounts in memory, want 5", n)
	}
	l.Release(openHold)
	l.Close()

	// The snapshot keeps the expiries: a day later, compaction drops every
	// account that has expired by then, the one that learnt its expiry
	// too, and keeps the one whose expiry is unknown.
	now = now.Add(26 * time.Hour)
	l, rec, err := Open(path, log.all(), Options{Clock: clock, Anchor: log.anchor, CompactEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !rec.Compacted {
		t.Fatalf("open did not compact: %+v", rec)
	}
	if _, ok := l.Balance(long); ok {
		t.Error("a dropped account came back")
	}
	for g, keep := range map[wire.ContentID]bool{recent: false, live: false, learnt: false, held: false, unknown: true} {
		if _, ok := l.Balance(g); ok != keep {
			t.Errorf("account %s in memory: %v, want %v", g, ok, keep)
		}
	}
	if got := size(t, path); got != snapshotSize(1, 0) {
		t.Errorf("file is %d bytes, want a snapshot of one account (%d)", got, snapshotSize(1, 0))
	}
}

func TestAutoCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	var log receipts
	opt := Options{Anchor: log.anchor, CompactEvery: 10}
	l, _, err := Open(path, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Each serve appends a hold and a settlement (the first also the
	// account), so a snapshot follows every fifth serve.
	for i := 0; i < 24; i++ {
		log.serve(t, l, gid(1), 1<<20, 10, 3)
	}
	if s := l.Stats(); s.Compactions != 4 || s.RecordsSinceSnapshot != 8 || s.LastCompactErr != nil {
		t.Fatalf("stats %+v, want 4 compactions and 8 records since", s)
	}
	if a, ok, _ := ReadAnchor(path); !ok || a.Count != 20 {
		t.Fatalf("anchor %+v, want 20", a)
	}
	l.Close()

	// Concurrent serves with compaction whenever the ledger falls idle.
	l, _, err = Open(path, log.all(), Options{Anchor: log.anchor, CompactEvery: 16})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				h, err := l.Hold(ctx, gid(byte(w%2)), 1<<20, 10)
				if err != nil {
					t.Error(err)
					return
				}
				if i%4 == 3 {
					l.Release(h)
					continue
				}
				log.seal(gid(byte(w%2)), h, 2)
				l.Settle(h, 2)
			}
		}()
	}
	wg.Wait()
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	want0, want1 := balance(t, l, gid(0)), balance(t, l, gid(1))
	if want0.SpentUJ != 4*30*2 || want1.SpentUJ != 3*24+4*30*2 {
		t.Fatalf("balances %+v, %+v", want0, want1)
	}
	l.Close()
	l, rec, err := Open(path, log.all(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if rec.Settled+rec.Released+rec.Corrected != 0 {
		t.Fatalf("recovery after a clean close: %+v", rec)
	}
	if b0, b1 := balance(t, l, gid(0)), balance(t, l, gid(1)); b0 != want0 || b1 != want1 {
		t.Fatalf("after reopen %+v, %+v; want %+v, %+v", b0, b1, want0, want1)
	}
}

// TestOpenKeepsNoClosedHolds: a snapshotted ledger replays no holds at
// all, and neither kind of file keeps a closed hold after Open.
func TestOpenKeepsNoClosedHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	var log receipts
	l, _, err := Open(path, nil, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		log.serve(t, l, gid(byte(i%4)), 1<<30, 10, 1)
	}
	l.Close()
	l, rec := open(t, path, log.all())
	if rec.Records != 4+2000 || len(l.holds) != 0 {
		t.Fatalf("replayed %d records and kept %d holds, want 2004 and none", rec.Records, len(l.holds))
	}
	if ok, err := l.Compact(log.anchor); !ok || err != nil {
		t.Fatal(ok, err)
	}
	l.Close()
	l, rec = open(t, path, log.all())
	defer l.Close()
	if rec.Records != 4+1 || len(l.holds) != 0 || l.Stats().OpenHolds != 0 {
		t.Fatalf("replayed %d records and kept %d holds, want the 5 of the snapshot and none", rec.Records, len(l.holds))
	}
	if b := balance(t, l, gid(3)); b.SpentUJ != 250 {
		t.Fatalf("balance %+v, want spent 250", b)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _ := open(t, path, nil)
	_, _, err := Open(path, nil, Options{})
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second open: %v, want ErrLocked naming %s and pid %d", err, path, os.Getpid())
	}
	if _, err := l.Hold(ctx, gid(1), 10, 1); err != nil {
		t.Fatalf("the refused open disturbed the first: %v", err)
	}
	l.Close()
	l, rec := open(t, path, nil)
	defer l.Close()
	if rec.Released != 1 {
		t.Fatalf("reopen after close: %+v, want the open hold released", rec)
	}
}

func TestNotRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	sub := filepath.Join(dir, "dir")
	os.Mkdir(sub, 0o755)
	for _, path := range []string{fifo, sub} {
		done := make(chan error, 1)
		go func() {
			_, _, err := Open(path, nil, Options{})
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") {
				t.Errorf("open %s: %v, want a refusal", path, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("open %s hangs", path)
		}
		if _, _, err := ReadAnchor(path); err == nil {
			t.Errorf("ReadAnchor %s: no error", path)
		}
	}
}

func TestOldFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	old := []byte("MESHLDG1\x00\x00\x00\x09\x01\x02\x03\x04R\x00\x00\x00\x00\x00\x00\x00\x01")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Open(path, nil, Options{}); !errors.Is(err, ErrOldFormat) || !strings.Contains(err.Error(), "previous format") {
		t.Fatalf("open: %v, want ErrOldFormat", err)
	}
	if _, _, err := ReadAnchor(path); !errors.Is(err, ErrOldFormat) {
		t.Fatalf("ReadAnchor: %v, want ErrOldFormat", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, old) {
		t.Fatal("the old ledger was changed")
	}
}

func TestReadAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	if _, ok, err := ReadAnchor(path); ok || err != nil {
		t.Fatalf("absent file: %v, %v", ok, err)
	}
	var log receipts
	l, _ := open(t, path, nil)
	defer l.Close()
	log.serve(t, l, gid(1), 100, 10, 1)
	if _, ok, err := ReadAnchor(path); ok || err != nil {
		t.Fatalf("file without a snapshot: %v, %v", ok, err)
	}
	l.Compact(log.anchor)
	log.serve(t, l, gid(1), 100, 10, 1)
	if a, ok, err := ReadAnchor(path); !ok || err != nil || a.Count != 1 || a.Head != head(1) {
		t.Fatalf("after compaction: %+v, %v, %v", a, ok, err)
	}
	// A snapshot cut short of its end record is damage.
	b, _ := os.ReadFile(path)
	cut := filepath.Join(t.TempDir(), "ledger")
	os.WriteFile(cut, b[:snapshotSize(1, 0)-(12+sizeSnapEnd)], 0o644)
	if _, _, err := ReadAnchor(cut); !errors.Is(err, ErrDamaged) {
		t.Fatalf("ReadAnchor of a snapshot without its end: %v, want ErrDamaged", err)
	}
	if _, _, err := Open(cut, nil, Options{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Open of a snapshot without its end: %v, want ErrDamaged", err)
	}
}

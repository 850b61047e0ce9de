package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

var ctx = context.Background()

func gid(n byte) wire.ContentID { return wire.ContentOf([]byte{n}) }

func open(t *testing.T, path string, charges []Charge) (*Ledger, *Recovery) {
	t.Helper()
	l, rec, err := Open(path, charges, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l, rec
}

func balance(t testing.TB, l *Ledger, g wire.ContentID) Balance {
	t.Helper()
	b, ok := l.Balance(g)
	if !ok {
		t.Fatalf("no account for grant %s", g)
	}
	return b
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func TestHoldSettleRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _ := open(t, path, nil)
	g := gid(1)
	if _, ok := l.Balance(g); ok {
		t.Fatal("a grant nobody held against has an account")
	}
	h1, err := l.Hold(ctx, g, 1000, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := balance(t, l, g), (Balance{BudgetUJ: 1000, HeldUJ: 100, OpenHolds: 1, RemainingUJ: 900}); got != want {
		t.Fatalf("after hold: %+v, want %+v", got, want)
	}
	if err := l.Settle(h1, 60); err != nil {
		t.Fatal(err)
	}
	if got, want := balance(t, l, g), (Balance{BudgetUJ: 1000, SpentUJ: 60, RemainingUJ: 940}); got != want {
		t.Fatalf("after settle: %+v, want %+v", got, want)
	}
	if err := l.Settle(h1, 60); !errors.Is(err, ErrNoHold) {
		t.Fatalf("second settle: %v, want ErrNoHold", err)
	}
	h2, err := l.Hold(ctx, g, 1000, 200)
	if err != nil {
		t.Fatal(err)
	}
	if h2 <= h1 {
		t.Fatalf("hold numbers do not increase: %d then %d", h1, h2)
	}
	if err := l.Release(h2); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(h2); !errors.Is(err, ErrNoHold) {
		t.Fatalf("second release: %v, want ErrNoHold", err)
	}
	if got := balance(t, l, g).RemainingUJ; got != 940 {
		t.Fatalf("release did not return the hold: remaining %d, want 940", got)
	}

	before := size(t, path)
	if _, err := l.Hold(ctx, g, 1000, 941); !errors.Is(err, ErrExhausted) {
		t.Fatalf("hold over remaining: %v, want ErrExhausted", err)
	}
	if _, err := l.Hold(ctx, g, 999, 1); !errors.Is(err, ErrMismatch) {
		t.Fatalf("hold with another budget: %v, want ErrMismatch", err)
	}
	if _, err := l.Hold(ctx, gid(2), 10, 11); !errors.Is(err, ErrExhausted) {
		t.Fatalf("first hold over a fresh budget: %v, want ErrExhausted", err)
	}
	if _, ok := l.Balance(gid(2)); ok {
		t.Fatal("a refused first hold opened an account")
	}
	if after := size(t, path); after != before {
		t.Fatalf("refused holds changed the file: %d -> %d bytes", before, after)
	}
	if got := balance(t, l, g).RemainingUJ; got != 940 {
		t.Fatalf("refused holds changed the balance: remaining %d", got)
	}
	h3, err := l.Hold(ctx, g, 1000, 940)
	if err != nil {
		t.Fatalf("hold of exactly the remainder: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Hold(ctx, g, 1000, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("hold after close: %v, want ErrClosed", err)
	}

	// Reopen: the settled hold survives, the open one (h3) has no receipt
	// and is released.
	l, rec := open(t, path, []Charge{{Grant: g, Hold: h1, ChargedUJ: 60}})
	defer l.Close()
	if rec.Released != 1 || rec.Settled != 0 || rec.Corrected != 0 {
		t.Fatalf("recovery %+v, want one release (hold %d)", rec, h3)
	}
	if got, want := balance(t, l, g), (Balance{BudgetUJ: 1000, SpentUJ: 60, RemainingUJ: 940}); got != want {
		t.Fatalf("after reopen: %+v, want %+v", got, want)
	}
	h4, err := l.Hold(ctx, g, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if h4 <= h3 {
		t.Fatalf("hold number %d reused after reopen (last was %d)", h4, h3)
	}
}

func TestHoldIsInFileWhenGranted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger")
	l, _ := open(t, path, nil)
	defer l.Close()
	h, err := l.Hold(ctx, gid(1), 500, 123)
	if err != nil {
		t.Fatal(err)
	}
	// Copy the file as it is now, as a crash would leave it, and open the
	// copy: the granted hold is there, and with no receipt it is released.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy")
	if err := os.WriteFile(cp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, rec := open(t, cp, nil)
	defer c.Close()
	if rec.Released != 1 {
		t.Fatalf("the copy does not show the open hold: %+v", rec)
	}
	// With its receipt it is settled instead.
	if err := os.WriteFile(cp+"2", b, 0o644); err != nil {
		t.Fatal(err)
	}
	c2, rec := open(t, cp+"2", []Charge{{Grant: gid(1), Hold: h, ChargedUJ: 77}})
	defer c2.Close()
	if rec.Settled != 1 || balance(t, c2, gid(1)).SpentUJ != 77 {
		t.Fatalf("recovery %+v, balance %+v: want the hold settled at 77", rec, balance(t, c2, gid(1)))
	}
}

// crashed builds a ledger file with the given history and abandons it
// without settling anything, as a crash would.
func crashed(t *testing.T, path string, build func(l *Ledger)) {
	t.Helper()
	l, _ := open(t, path, nil)
	build(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRecoveryRules(t *testing.T) {
	g, other := gid(1), gid(2)
	// Every case starts from the same history: hold 1 (100) settled at 40,
	// hold 2 (100) released, hold 3 (100) and hold 4 (100) open; hold 5 is
	// on the other grant and open.
	history := func(l *Ledger) {
		for i, a := range []struct {
			g      wire.ContentID
			settle int64 // -1 release, -2 leave open
		}{{g, 40}, {g, -1}, {g, -2}, {g, -2}, {other, -2}} {
			h, err := l.Hold(ctx, a.g, 1000, 100)
			if err != nil || h != uint64(i+1) {
				t.Fatalf("hold %d: %d, %v", i+1, h, err)
			}
			switch a.settle {
			case -1:
				l.Release(h)
			case -2:
			default:
				l.Settle(h, uint64(a.settle))
			}
		}
	}
	tests := []struct {
		name                         string
		charges                      []Charge
		settled, released, corrected int
		spent, otherSpent            uint64
		err                          error
	}{
		{name: "no receipts: open holds released", released: 3, spent: 40},
		{name: "open hold with receipt settled, the rest released",
			charges: []Charge{{g, 1, 40, 0}, {g, 3, 70, 1}}, settled: 1, released: 2, spent: 110},
		{name: "receipt for a released hold corrects it",
			charges: []Charge{{g, 1, 40, 0}, {g, 2, 55, 1}}, corrected: 1, released: 3, spent: 95},
		{name: "receipt disagreeing with a settlement corrects it",
			charges: []Charge{{g, 1, 45, 0}}, corrected: 1, released: 3, spent: 45},
		{name: "every hold has its receipt",
			charges: []Charge{{g, 1, 40, 0}, {g, 3, 1, 1}, {g, 4, 100, 2}, {other, 5, 9, 3}},
			settled: 3, spent: 141, otherSpent: 9},
		{name: "receipt for an unknown hold", charges: []Charge{{g, 99, 1, 0}}, err: ErrMismatch},
		{name: "receipt against the wrong grant", charges: []Charge{{other, 3, 1, 0}}, err: ErrMismatch},
		{name: "two receipts settle one hold", charges: []Charge{{g, 3, 1, 0}, {g, 3, 1, 1}}, err: ErrMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger")
			crashed(t, path, history)
			before := size(t, path)
			l, rec, err := Open(path, tc.charges, Options{})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("open: %v, want %v", err, tc.err)
				}
				if after := size(t, path); after != before {
					t.Fatalf("a refused open changed the file: %d -> %d", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.Settled != tc.settled || rec.Released != tc.released || rec.Corrected != tc.corrected {
				t.Errorf("recovery %+v, want settled %d released %d corrected %d", rec, tc.settled, tc.released, tc.corrected)
			}
			check := func(l *Ledger) {
				t.Helper()
				b := balance(t, l, g)
				if b.SpentUJ != tc.spent || b.HeldUJ != 0 || b.OpenHolds != 0 || b.RemainingUJ != 1000-tc.spent {
					t.Errorf("grant: %+v, want spent %d and nothing held", b, tc.spent)
				}
				if b := balance(t, l, other); b.SpentUJ != tc.otherSpent || b.HeldUJ != 0 {
					t.Errorf("other grant: %+v, want spent %d", b, tc.otherSpent)
				}
			}
			check(l)
			l.Close()
			// Recovery is durable and idempotent.
			l, rec = open(t, path, tc.charges)
			defer l.Close()
			if rec.Settled+rec.Released+rec.Corrected != 0 {
				t.Errorf("second recovery changed things again: %+v", rec)
			}
			check(l)
		})
	}
}

// history3 is three serves on one grant (hold 10, settle 7): records
//
//	0 A @8, 1 H @69, 2 S @130, 3 H @159, 4 S @220, 5 H @249, 6 S @310
//
// and the file is 339 bytes.
func history3(l *Ledger) {
	for i := 0; i < 3; i++ {
		h, _ := l.Hold(ctx, gid(1), 1000, 10)
		l.Settle(h, 7)
	}
}

func TestTornTail(t *testing.T) {
	g := gid(1)
	frame := framelog.AppendFrame(nil, settleRecord(3, 7))
	type tailCase struct {
		name string
		tail []byte
	}
	tests := []tailCase{
		{"final frame zero-filled", make([]byte, len(frame))},
		{"zeros longer than a frame", make([]byte, 100)},
		{"zeros longer than a sector", make([]byte, 1500)},
	}
	for _, k := range []int{1, 11, 12, 13, len(frame) - 1} {
		tests = append(tests, tailCase{fmt.Sprintf("final frame cut to %d bytes", k), frame[:k]})
	}
	for k := 1; k < framelog.HeaderSize; k++ {
		tests = append(tests, tailCase{fmt.Sprintf("%d stray bytes", k), bytes.Repeat([]byte{0xab}, k)})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger")
			crashed(t, path, history3)
			good, _ := os.ReadFile(path)
			if len(good) != 339 {
				t.Fatalf("history is %d bytes, want 339", len(good))
			}
			if err := os.WriteFile(path, append(good, tc.tail...), 0o644); err != nil {
				t.Fatal(err)
			}
			charges := []Charge{{g, 1, 7, 0}, {g, 2, 7, 1}, {g, 3, 7, 2}}
			l, rec := open(t, path, charges)
			if rec.TornBytes != int64(len(tc.tail)) || rec.Records != 7 {
				t.Errorf("recovery %+v, want %d torn bytes and 7 records", rec, len(tc.tail))
			}
			if got := size(t, path); got != int64(len(good)) {
				t.Errorf("file is %d bytes after the cut, want %d", got, len(good))
			}
			if b := balance(t, l, g); b.SpentUJ != 21 {
				t.Errorf("balance %+v after the cut, want spent 21", b)
			}
			if _, err := l.Hold(ctx, g, 1000, 1); err != nil {
				t.Errorf("hold after the cut: %v", err)
			}
			l.Close()
			l, rec = open(t, path, charges)
			l.Close()
			if rec.TornBytes != 0 || rec.Records != 8 || rec.Released != 1 {
				t.Errorf("after appending past the cut, reopen gives %+v, want 8 records, 1 release, nothing torn", rec)
			}
		})
	}
}

// TestTornSectors: a final frame whose header is intact and whose body is
// zero from a 512-byte boundary to the end is a torn write, cut like the
// others (framelog's fourth rule).
func TestTornSectors(t *testing.T) {
	g := gid(1)
	path := filepath.Join(t.TempDir(), "ledger")
	file := append([]byte(format.Magic), framelog.AppendFrame(nil, accountRecord(g, 1000, 0))...)
	id := uint64(1)
	for ; ; id++ {
		next := framelog.AppendFrame(nil, holdRecord(id, g, 1))
		if body := len(file) + framelog.HeaderSize; body < 512 && len(file)+len(next) > 512 {
			clear(next[512-len(file):])
			good := len(file)
			file = append(file, next...)
			if err := os.WriteFile(path, file, 0o644); err != nil {
				t.Fatal(err)
			}
			l, rec := open(t, path, nil)
			defer l.Close()
			if rec.TornBytes != int64(len(next)) || rec.Released != int(id-1) {
				t.Fatalf("recovery %+v, want %d torn bytes and %d holds released", rec, len(next), id-1)
			}
			// Cut, then one release record appended per open hold.
			if got, want := size(t, path), int64(good)+int64(id-1)*(framelog.HeaderSize+sizeRelease); got != want {
				t.Fatalf("file is %d bytes after the cut and the releases, want %d", got, want)
			}
			return
		}
		file = append(file, next...)
	}
}

func TestDamageRefused(t *testing.T) {
	g := gid(1)
	path := filepath.Join(t.TempDir(), "ledger")
	crashed(t, path, history3)
	good, _ := os.ReadFile(path)
	tests := []struct {
		name   string
		break_ func([]byte)
		index  uint64
		offset int64
	}{
		{"bad magic", func(b []byte) { b[0] = 'X' }, 0, 0},
		{"flipped bit in a body mid-file", func(b []byte) { b[159+12+20] ^= 1 }, 3, 159},
		{"flipped bit in a length mid-file", func(b []byte) { b[159+3] ^= 1 }, 3, 159},
		{"flipped bit in the first record's length", func(b []byte) { b[8+2] ^= 0x40 }, 0, 8},
		{"flipped bit in the final body", func(b []byte) { b[310+12+9] ^= 0x80 }, 6, 310},
		{"zeroed final header, body intact", func(b []byte) { clear(b[310:322]) }, 6, 310},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := append([]byte(nil), good...)
			tc.break_(b)
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := Open(path, nil, Options{})
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("open: %v, want ErrDamaged", err)
			}
			var ce *framelog.CorruptError
			if !errors.As(err, &ce) || ce.Index != tc.index || ce.Offset != tc.offset {
				t.Fatalf("open: %v, want the damage at record %d, byte offset %d", err, tc.index, tc.offset)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
				t.Fatal("a damaged ledger was changed")
			}
		})
	}
	// A record that contradicts the history is damage too, even with a
	// good checksum: here a release of a hold that was settled.
	l, _ := open(t, path+"x", nil)
	h, _ := l.Hold(ctx, g, 1000, 10)
	l.Settle(h, 3)
	l.mu.Lock()
	l.append(releaseRecord(h))
	l.mu.Unlock()
	l.Close()
	before, _ := os.ReadFile(path + "x")
	_, _, err := Open(path+"x", nil, Options{})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "record 3 at byte offset 159") {
		t.Fatalf("open with a contradictory record: %v, want ErrDamaged at record 3, byte offset 159", err)
	}
	if after, _ := os.ReadFile(path + "x"); !bytes.Equal(after, before) {
		t.Fatal("a contradictory ledger was changed")
	}
}

func TestConcurrentHolds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	l, _ := open(t, path, nil)
	g := gid(1)
	const workers, amount, budget = 64, 10, 315
	var granted atomic.Int64
	var wg sync.WaitGroup
	holds := make(chan uint64, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := l.Hold(ctx, g, budget, amount)
			switch {
			case err == nil:
				granted.Add(1)
				holds <- h
			case !errors.Is(err, ErrExhausted):
				t.Errorf("hold: %v", err)
			}
		}()
	}
	wg.Wait()
	close(holds)
	if granted.Load() != budget/amount {
		t.Fatalf("%d holds granted, want exactly %d", granted.Load(), budget/amount)
	}
	if b := balance(t, l, g); b.HeldUJ != budget/amount*amount || b.RemainingUJ != budget%amount {
		t.Fatalf("balance %+v", b)
	}
	seen := map[uint64]bool{}
	var settle sync.WaitGroup
	for h := range holds {
		if seen[h] {
			t.Fatalf("hold %d granted twice", h)
		}
		seen[h] = true
		settle.Add(1)
		go func() {
			defer settle.Done()
			if err := l.Settle(h, 7); err != nil {
				t.Error(err)
			}
		}()
	}
	settle.Wait()
	want := Balance{BudgetUJ: budget, SpentUJ: 7 * (budget / amount), RemainingUJ: budget - 7*(budget/amount)}
	if b := balance(t, l, g); b != want {
		t.Fatalf("after settling: %+v, want %+v", b, want)
	}
	l.Close()
	var charges []Charge
	for h := range seen {
		charges = append(charges, Charge{Grant: g, Hold: h, ChargedUJ: 7})
	}
	l, rec := open(t, path, charges)
	defer l.Close()
	if rec.Settled+rec.Released+rec.Corrected != 0 {
		t.Fatalf("a clean close left work for recovery: %+v", rec)
	}
	if b := balance(t, l, g); b != want {
		t.Fatalf("after reopen: %+v, want %+v", b, want)
	}
}

func TestOverrunIsChargedHonestly(t *testing.T) {
	l, _ := open(t, filepath.Join(t.TempDir(), "ledger"), nil)
	defer l.Close()
	g := gid(1)
	a, _ := l.Hold(ctx, g, 100, 60)
	b, _ := l.Hold(ctx, g, 100, 40)
	if err := l.Settle(a, 90); err != nil { // the meter read more than the ceiling
		t.Fatal(err)
	}
	if got := balance(t, l, g); got.SpentUJ != 90 || got.RemainingUJ != 0 || got.OverdrawnUJ != 30 {
		t.Fatalf("overrun: %+v, want spent 90, nothing remaining, 30 overdrawn", got)
	}
	if _, err := l.Hold(ctx, g, 100, 1); !errors.Is(err, ErrExhausted) {
		t.Fatalf("hold on an overdrawn grant: %v", err)
	}
	l.Release(b)
	if got := balance(t, l, g); got.RemainingUJ != 10 || got.OverdrawnUJ != 0 {
		t.Fatalf("after release: %+v", got)
	}
}

// BenchmarkHold measures group commit: 32 concurrent holders with real
// fsync; holds/fsync says how many holds shared each fsync.
func BenchmarkHold(b *testing.B) {
	l, _, err := Open(filepath.Join(b.TempDir(), "ledger"), nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	g := gid(1)
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h, err := l.Hold(ctx, g, 1<<62, 10)
			if err != nil {
				b.Error(err)
				return
			}
			l.Settle(h, 5)
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/float64(l.Stats().Syncs), "holds/fsync")
}

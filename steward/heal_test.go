package steward

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// A write or fsync the storage refuses fails the log, and the log heals by
// itself once the storage takes writes again: every acknowledged receipt
// stays, every refused one is gone, the chain continues from the last
// acknowledged receipt with no gap and no duplicate, and no torn frame is
// left mid-log (a verify from genesis proves all three).
func TestLogHealsAfterStorageFailure(t *testing.T) {
	enospc := framelog.Fault{Err: syscall.ENOSPC}
	cases := []struct {
		name string
		opt  LogOptions
		// fail arms the fault after the first receipts are durable.
		fail func(x *framelog.Faults, writes, syncs int)
	}{
		{"write ENOSPC, nothing written", LogOptions{CheckpointEvery: -1}, func(x *framelog.Faults, w, _ int) { x.FailWrite(w+1, enospc) }},
		{"write ENOSPC, short write", LogOptions{CheckpointEvery: -1}, func(x *framelog.Faults, w, _ int) {
			x.FailWrite(w+1, framelog.Fault{Err: syscall.ENOSPC, Short: 40})
		}},
		{"fsync EIO after a full write", LogOptions{CheckpointEvery: -1}, func(x *framelog.Faults, _, s int) { x.FailSync(s+1, syscall.EIO) }},
		{"disk full for a while", LogOptions{CheckpointEvery: -1}, func(x *framelog.Faults, _, _ int) {
			x.Down(framelog.Fault{Err: syscall.ENOSPC, Short: 7})
		}},
		// Three receipts fill a segment, so the fourth rotates: the new
		// segment's magic cannot be written.
		{"rotation refused", LogOptions{CheckpointEvery: -1, SegmentBytes: 600}, func(x *framelog.Faults, w, _ int) {
			x.FailWrite(w+1, framelog.Fault{Err: syscall.ENOSPC, Short: 3})
		}},
		// The checkpoint after the fourth receipt cannot be written: the
		// receipt is durable and acknowledged, the log fails until healed.
		{"checkpoint refused", LogOptions{CheckpointEvery: 4}, func(x *framelog.Faults, w, _ int) {
			x.FailWrite(w+2, framelog.Fault{Err: syscall.ENOSPC, Short: 5})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "receipts")
			k := testKey(t)
			var x framelog.Faults
			opt := tc.opt
			opt.files = x.Wrap
			st, l, _ := openTestLog(t, dir, k, opt)
			var acked []*Sealed
			seal := func(i int) error {
				s, err := st.Seal(bg, draft(i))
				if err == nil {
					acked = append(acked, s)
				}
				return err
			}
			for i := 0; i < 3; i++ {
				if err := seal(i); err != nil {
					t.Fatal(err)
				}
			}
			w, s := x.Counts()
			tc.fail(&x, w, s)
			err := seal(3)
			refused := err != nil
			if refused && !errors.Is(err, ErrStorage) {
				t.Fatalf("seal on a refusing storage: %v, want ErrStorage", err)
			}
			if refused == (tc.name == "checkpoint refused") {
				t.Fatalf("seal of the receipt the fault hit: %v", err)
			}
			if !l.down.Load() {
				t.Fatal("the log did not fail on the refused write")
			}
			if tc.name == "disk full for a while" {
				// While the storage is down every serve is refused, nothing
				// is acknowledged, and Storage says why.
				for i := 0; i < 3; i++ {
					if err := seal(10 + i); !errors.Is(err, ErrStorage) {
						t.Fatalf("seal on a full disk: %v", err)
					}
					if err := l.Storage(); !errors.Is(err, syscall.ENOSPC) {
						t.Fatalf("Storage on a full disk: %v", err)
					}
				}
			}
			x.Up()
			if err := l.Storage(); err != nil {
				t.Fatalf("Storage once writes succeed again: %v", err)
			}
			// Healed, the segment holds nothing after its last durable
			// frame but padding: nothing a refused write left behind is
			// there for the next to follow.
			if b, err := os.ReadFile(filepath.Join(dir, SegmentName(l.seg))); err != nil || int64(len(b)) < l.w.Synced() || bytes.ContainsFunc(b[l.w.Synced():], func(r rune) bool { return r != 0 }) {
				t.Fatalf("segment after healing: %d bytes (err %v), not zeros after its durable end at %d", len(b), err, l.w.Synced())
			}
			for i := 20; i < 25; i++ {
				if err := seal(i); err != nil {
					t.Fatalf("seal after healing: %v", err)
				}
			}
			for i, s := range acked {
				if s.Receipt.Sequence != uint64(i) {
					t.Fatalf("acknowledged receipt %d has sequence %d: a gap or a duplicate", i, s.Receipt.Sequence)
				}
			}
			if got := l.Durable(); got != uint64(len(acked)) {
				t.Fatalf("Durable %d, acknowledged %d", got, len(acked))
			}
			// A reader of the newest records (answered from memory) gets
			// the acknowledged ones, not those the heal rolled back.
			got, err := l.Range(bg, 0, len(acked))
			if err != nil || len(got) != len(acked) {
				t.Fatalf("Range after healing: %d envelopes, %v; %d acknowledged", len(got), err, len(acked))
			}
			for i, s := range acked {
				if !bytes.Equal(got[i], s.Envelope) {
					t.Fatalf("Range after healing: envelope %d is not the one acknowledged", i)
				}
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			want := map[uint64]wire.ContentID{}
			for _, s := range acked {
				want[s.Receipt.Sequence] = s.ID
			}
			seen := 0
			v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public(), Visit: func(o *Opened) error {
				if id, ok := want[o.Receipt.Sequence]; !ok || id != o.ID {
					t.Errorf("the log holds receipt %d %s, not the one acknowledged", o.Receipt.Sequence, o.ID)
				}
				seen++
				return nil
			}})
			if err != nil {
				t.Fatalf("verify after healing: %v", err)
			}
			if v.TornBytes != 0 || v.Records != uint64(len(acked)) || seen != len(acked) {
				t.Fatalf("verify: %d records (%d seen), %d torn bytes; %d acknowledged", v.Records, seen, v.TornBytes, len(acked))
			}
			// The log reopens as it is: nothing to cut.
			_, l2, rep := openTestLog(t, dir, k, LogOptions{})
			if rep.Records != uint64(len(acked)) || rep.TornBytes != 0 {
				t.Fatalf("reopen: %+v", rep)
			}
			l2.Close()
		})
	}
}

// While the storage refuses writes, a heal that cannot probe leaves the log
// failed, and naming the cause.
func TestLogStorageNamesCause(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	var x framelog.Faults
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, files: x.Wrap})
	defer l.Close()
	x.Down(framelog.Fault{Err: syscall.ENOSPC})
	if _, err := st.Seal(bg, draft(0)); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrStorage) {
		t.Fatalf("seal: %v", err)
	}
	for i := 0; i < 3; i++ {
		if err := l.Storage(); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrStorage) {
			t.Fatalf("Storage while full: %v", err)
		}
	}
	if l.Next() != 0 {
		t.Fatalf("a refused receipt took sequence 0: next %d", l.Next())
	}
}

// Concurrent sealers sharing fsyncs when one fsync fails: every sealer
// whose receipt was in the failed flush is refused, the log heals, and the
// log then holds exactly the receipts acknowledged.
func TestLogHealsUnderConcurrentSealers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	var x framelog.Faults
	// Checkpoints only on Close, so that every fsync counted is a
	// segment's and each failed one refuses at least its flusher's seal.
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, files: x.Wrap})
	// Fail the 5th and the 12th fsync from now.
	_, s0 := x.Counts()
	x.FailSync(s0+5, syscall.EIO)
	x.FailSync(s0+12, syscall.ENOSPC)
	const workers, each = 8, 25
	var mu sync.Mutex
	acked := map[uint64]wire.ContentID{}
	refused := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				s, err := st.Seal(bg, draft(w*each+i))
				mu.Lock()
				switch {
				case err == nil:
					if _, dup := acked[s.Receipt.Sequence]; dup {
						t.Errorf("sequence %d acknowledged twice", s.Receipt.Sequence)
					}
					acked[s.Receipt.Sequence] = s.ID
				case errors.Is(err, ErrStorage):
					refused++
				default:
					t.Errorf("seal: %v", err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := l.Storage(); err != nil {
		t.Fatalf("Storage after the faults passed: %v", err)
	}
	if refused == 0 {
		t.Fatal("no seal was refused: the faults did not fire")
	}
	// The newest records, answered from memory, are the acknowledged
	// ones: those the heals rolled back were dropped there too.
	if d := l.Durable(); d != uint64(len(acked)) {
		t.Fatalf("Durable %d, acknowledged %d", d, len(acked))
	}
	got, err := l.Range(bg, 0, len(acked))
	if err != nil || len(got) != len(acked) {
		t.Fatalf("Range: %d envelopes, %v; %d acknowledged", len(got), err, len(acked))
	}
	for i, e := range got {
		if id := wire.ContentOf(e); id != acked[uint64(i)] {
			t.Fatalf("Range: receipt %d is %s, the one acknowledged %s", i, id, acked[uint64(i)])
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seen := 0
	v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public(), Visit: func(o *Opened) error {
		if id, ok := acked[o.Receipt.Sequence]; !ok || id != o.ID {
			t.Errorf("the log holds receipt %d %s, which was not acknowledged", o.Receipt.Sequence, o.ID)
		}
		seen++
		return nil
	}})
	if err != nil || seen != len(acked) || v.TornBytes != 0 {
		t.Fatalf("verify: %v; %d in the log, %d acknowledged, %d refused", err, seen, len(acked), refused)
	}
	t.Logf("%d acknowledged, %d refused, %d checkpoints", len(acked), refused, v.Checkpoints)
}

// The log fails (here from a stale report) while the writer is healthy
// and a flush is in flight; the heal starts, and only then does that
// flush's fsync fail. The heal must still roll the head back past the
// frames its cut drops: it used to ask the writer whether it had failed
// before Recover waited the flush out, so it cut the file without rolling
// back, and the next receipt, built against the dropped head, was written
// straight after the cut with a later sequence.
func TestLogHealsWhenFlushFailsDuringHeal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	var x framelog.Faults
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, files: x.Wrap})
	acked := map[uint64]wire.ContentID{}
	seal := func(i int) error {
		s, err := st.Seal(bg, draft(i))
		if err == nil {
			acked[s.Receipt.Sequence] = s.ID
		}
		return err
	}
	for i := range 2 {
		if err := seal(i); err != nil {
			t.Fatal(err)
		}
	}
	_, s0 := x.Counts()
	inFsync, release := make(chan struct{}), make(chan struct{})
	x.HookSync(s0+1, func() { close(inFsync); <-release })
	x.FailSync(s0+1, syscall.EIO)
	sealed := make(chan error, 1)
	go func() {
		_, err := st.Seal(bg, draft(2))
		sealed <- err
	}()
	<-inFsync
	l.fail(ErrStorage) // the log fails while the writer is still healthy
	healed := make(chan error, 1)
	go func() { healed <- l.Storage() }()
	// Let the heal get under way (holding mu, waiting on the flush) before
	// the flush fails.
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-sealed; !errors.Is(err, ErrStorage) {
		t.Fatalf("the seal whose fsync failed: %v, want ErrStorage", err)
	}
	if err := <-healed; err != nil {
		if err = l.Storage(); err != nil {
			t.Fatalf("Storage: %v", err)
		}
	}
	if n := l.Next(); n != 2 {
		t.Fatalf("after the heal the next sequence is %d, want 2", n)
	}
	for i := 3; i < 6; i++ {
		if err := seal(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	seen := 0
	v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public(), Visit: func(o *Opened) error {
		if id, ok := acked[o.Receipt.Sequence]; !ok || id != o.ID {
			t.Errorf("the log holds receipt %d %s, which was not acknowledged", o.Receipt.Sequence, o.ID)
		}
		seen++
		return nil
	}})
	if err != nil || seen != len(acked) || v.TornBytes != 0 {
		t.Fatalf("verify: %v; %d in the log, %d acknowledged", err, seen, len(acked))
	}
}

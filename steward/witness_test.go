package steward

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCounter is a monotonic counter in memory, as a TPM NV counter
// behaves: unwritten until its first increment, which sets it to start.
type fakeCounter struct {
	start   uint64
	value   uint64
	written bool
	// failAdvance makes the next Advance fail (a crash between sealing a
	// checkpoint and advancing the counter).
	failAdvance bool
}

func (f *fakeCounter) Read(context.Context) (uint64, bool, error) { return f.value, f.written, nil }
func (f *fakeCounter) String() string                             { return "fake counter 0x01000001" }
func (f *fakeCounter) Advance(_ context.Context, to uint64) (uint64, error) {
	if f.failAdvance {
		f.failAdvance = false
		return f.value, errors.New("power cut")
	}
	if !f.written {
		f.value, f.written = f.start, true
	}
	for f.value < to {
		f.value++
	}
	return f.value, nil
}

// copyDir copies a flat log directory (what an operator's backup holds).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func sealN(t *testing.T, st *Steward, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// An older copy of the log is refused, naming the counter and both values;
// the log as the node left it opens.
func TestWitnessRefusesOlderCopy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	old := filepath.Join(t.TempDir(), "receipts-at-15")
	k := testKey(t)
	w := &fakeCounter{start: 40}
	st, l, rep := openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	if rep.Witness == nil || rep.Witness.Written {
		t.Fatalf("fresh counter: report %+v, want unwritten", rep.Witness)
	}
	sealN(t, st, 15)
	l.Close() // checkpoint at 15, first binding: 40
	if !w.written || w.value != 40 {
		t.Fatalf("after the first checkpoint the counter is %d (written %v), want 40", w.value, w.written)
	}
	copyDir(t, dir, old)
	st, l, rep = openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	if rep.Witness == nil || rep.Witness.Bound == nil || *rep.Witness.Bound != 40 || rep.Witness.CaughtUp {
		t.Fatalf("reopen: witness report %+v", rep.Witness)
	}
	sealN(t, st, 15)
	l.Close() // checkpoint at 30: 41
	if w.value != 41 {
		t.Fatalf("counter %d, want 41", w.value)
	}
	_, _, err := OpenLog(bg, old, LogOptions{Key: k, Witness: w})
	if !errors.Is(err, ErrRolledBack) {
		t.Fatalf("open of the copy at 15: %v, want ErrRolledBack", err)
	}
	for _, want := range []string{"fake counter 0x01000001 reads 41", "15 receipts", "bound to 40", "1 checkpoint(s) behind"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// The live log still opens, holding all 30.
	_, l, rep = openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	if rep.Records != 30 {
		t.Fatalf("live log: %d receipts", rep.Records)
	}
	l.Close()
}

// A crash between sealing a checkpoint and advancing the counter leaves the
// log ahead of its counter: the next open catches the counter up, with no
// alarm.
func TestWitnessCrashBetweenSealAndAdvance(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	w := &fakeCounter{start: 7}
	st, l, _ := openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	sealN(t, st, 3)
	l.Close() // 7
	st, l, _ = openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	sealN(t, st, 3)
	w.failAdvance = true
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "not advanced") {
		t.Fatalf("close with the advance cut: %v", err)
	}
	if w.value != 7 {
		t.Fatalf("counter %d, want 7 (the advance failed)", w.value)
	}
	_, l, rep := openTestLog(t, dir, k, LogOptions{Witness: w, CheckpointEvery: -1})
	defer l.Close()
	if rep.Witness == nil || !rep.Witness.CaughtUp || rep.Witness.Value != 8 || w.value != 8 {
		t.Fatalf("reopen: report %+v counter %d, want caught up to 8", rep.Witness, w.value)
	}
}

// The table of starts that must be refused, and the one that adopts.
func TestWitnessBinding(t *testing.T) {
	k := testKey(t)
	cases := []struct {
		name    string
		counter fakeCounter
		prep    func(t *testing.T, dir string)
		wantErr string
	}{
		{"unwritten counter adopts a log without bindings", fakeCounter{start: 3}, func(t *testing.T, dir string) {
			st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1})
			sealN(t, st, 2)
			l.Close()
		}, ""},
		{"written counter, log bound to none", fakeCounter{start: 3, value: 5, written: true}, func(t *testing.T, dir string) {
			st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1})
			sealN(t, st, 2)
			l.Close()
		}, "reads 5, but its newest checkpoint (2 receipts) is bound to none"},
		{"written counter, empty log", fakeCounter{start: 3, value: 5, written: true}, func(t *testing.T, dir string) {}, "reads 5, but the log holds no checkpoint (0 receipts"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "receipts")
			c.prep(t, dir)
			w := c.counter
			l, _, err := OpenLog(bg, dir, LogOptions{Key: k, Witness: &w})
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				// Bound by the first checkpoint sealed after the open.
				sealN(t, New(k, l, Options{Clock: testClock}), 1)
				l.Close()
				if !w.written || w.value != 3 {
					t.Fatalf("counter %d written %v after the first checkpoint, want 3", w.value, w.written)
				}
				return
			}
			if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err %v, want ErrRolledBack with %q", err, c.wantErr)
			}
		})
	}
}

// A checkpoints file removed from a log holding receipts is refused, not
// silently recreated; verify reports it; repair recreates it on purpose.
func TestCheckpointsFileMissing(t *testing.T) {
	dir, _, _ := writeLog(t, 4)
	k := testKey(t)
	os.Remove(filepath.Join(dir, checkpointsName))
	_, _, err := OpenLog(bg, dir, LogOptions{Key: k})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "checkpoints file is missing while the segments hold 4 receipts") {
		t.Fatalf("open: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, checkpointsName)); err == nil {
		t.Fatal("the refused open recreated the checkpoints file")
	}
	v, err := VerifyLog(bg, dir, VerifyOptions{})
	if err != nil || !v.CheckpointsMissing || v.Records != 4 {
		t.Fatalf("verify: %v %+v, want 4 receipts and CheckpointsMissing", err, v)
	}
	rr, err := RepairLog(bg, dir, nil, false)
	if err != nil || !rr.CheckpointsMissing || rr.Applied {
		t.Fatalf("repair dry run: %v %+v", err, rr)
	}
	if rr, err = RepairLog(bg, dir, nil, true); err != nil || !rr.Applied {
		t.Fatalf("repair: %v %+v", err, rr)
	}
	_, l, rep := openTestLog(t, dir, k, LogOptions{})
	if rep.Records != 4 {
		t.Fatalf("after repair: %d receipts", rep.Records)
	}
	l.Close()
}

package steward

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// dirBytes is the size of every regular file in dir, measured apart from
// the Budget's own accounting.
func dirBytes(t testing.TB, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// stepClock advances one second per call, so growth rates are exact.
func stepClock() func() time.Time {
	var n atomic.Int64
	return func() time.Time { return testClock().Add(time.Duration(n.Add(1)) * time.Second) }
}

const (
	soakSeg   = 8 << 10
	soakLimit = 96 << 10
)

func soakOptions() LogOptions {
	return LogOptions{SegmentBytes: soakSeg, CheckpointEvery: 16, NoSync: true}
}

// TestBudgetSoak seals many small receipts through a steward with a tiny
// segment size and budget, a pass after each: the log directory never
// passes its limit, nothing is refused, and the archive plus the live log
// verify from genesis — every receipt and every checkpoint.
func TestBudgetSoak(t *testing.T) {
	const n = 1200
	dir := filepath.Join(t.TempDir(), "receipts")
	arch := filepath.Join(t.TempDir(), "archive")
	k := testKey(t)
	_, l, _ := openTestLog(t, dir, k, soakOptions())
	b, err := NewBudget(l, BudgetOptions{MaxBytes: soakLimit, Reserve: 4 << 10, ArchiveDir: arch, Clock: stepClock()})
	if err != nil {
		t.Fatal(err)
	}
	st := New(k, l, Options{Clock: testClock, Admit: b.Admit})
	peak := int64(0)
	for i := 0; i < n; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatalf("seal %d: %v", i, err)
		}
		if _, err := b.Pass(bg); err != nil {
			t.Fatalf("pass after %d: %v", i, err)
		}
		got := dirBytes(t, dir)
		if got > soakLimit {
			t.Fatalf("after receipt %d the log holds %d bytes, over its limit %d", i, got, soakLimit)
		}
		if bb := b.Bytes(); bb != got {
			t.Fatalf("after receipt %d the budget counts %d bytes, the directory holds %d", i, bb, got)
		}
		peak = max(peak, got)
	}
	stats := b.Stats()
	if len(stats.Archived) == 0 || stats.Growth <= 0 || stats.DaysLeft < 0 {
		t.Fatalf("stats %+v", stats)
	}
	written := stats.Bytes
	for _, a := range stats.Archived {
		written += a.Bytes
	}
	t.Logf("%d receipts: %d bytes written, peak live %d (limit %d), %d segments archived, growth %.0f B/s, days left %.4f",
		n, written, peak, soakLimit, len(stats.Archived), stats.Growth, stats.DaysLeft)
	if written < 4*soakLimit {
		t.Fatalf("the soak wrote %d bytes, not well past its limit %d", written, soakLimit)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	rep, err := VerifyArchive(bg, dir, arch, VerifyOptions{Trusted: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	_, cks, _, err := readCheckpoints(bg, dir, k.Public(), false)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != n || rep.Verified != n || rep.Checkpoints != len(cks) {
		t.Fatalf("archive+live: %d records, %d verified, %d of %d checkpoints matched; want %d", rep.Records, rep.Verified, rep.Checkpoints, len(cks), n)
	}
	// The live log alone opens (from its newest checkpoint), verifies from
	// its first live segment's checkpoint, and refuses a genesis pass
	// without the archive.
	a, err := LiveAnchor(bg, dir, k.Public())
	if err != nil || a == nil {
		t.Fatalf("live anchor %v %v", a, err)
	}
	if vr, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public(), Anchor: a}); err != nil || vr.Records != n {
		t.Fatalf("live verify from %d: %+v %v", a.Count, vr, err)
	}
	if _, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()}); err == nil {
		t.Fatal("a log whose first segments were archived verified from genesis without the archive")
	}
	st2, l2, rep2 := openTestLog(t, dir, k, soakOptions())
	if rep2.Records != n {
		t.Fatalf("reopened with %d receipts", rep2.Records)
	}
	if s, err := st2.Seal(bg, draft(n)); err != nil || s.Receipt.Sequence != n {
		t.Fatalf("seal after reopen: %v", err)
	}
	l2.Close()
}

// TestBudgetDue: a pass is due only past the low water. A node that passes
// only when Due (not after every seal) still keeps the log under its limit
// with nothing refused, and a budget without a limit is never due.
func TestBudgetDue(t *testing.T) {
	const n = 600
	k := testKey(t)
	_, free, _ := openTestLog(t, filepath.Join(t.TempDir(), "receipts"), k, soakOptions())
	fb, err := NewBudget(free, BudgetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "receipts")
	_, l, _ := openTestLog(t, dir, k, soakOptions())
	b, err := NewBudget(l, BudgetOptions{MaxBytes: soakLimit, Reserve: 4 << 10, ArchiveDir: t.TempDir(), Clock: stepClock()})
	if err != nil {
		t.Fatal(err)
	}
	st := New(k, l, Options{Clock: testClock, Admit: b.Admit})
	stFree := New(k, free, Options{Clock: testClock})
	passes := 0
	for i := 0; i < n; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatalf("seal %d: %v", i, err)
		}
		if _, err := stFree.Seal(bg, draft(i)); err != nil {
			t.Fatalf("seal %d without a limit: %v", i, err)
		}
		if fb.Due() {
			t.Fatalf("after receipt %d a budget without a limit is due", i)
		}
		due := b.Due()
		if over := b.Bytes() > b.lowWater(); over && !due {
			t.Fatalf("after receipt %d: not due with %d bytes, past the low water %d", i, b.Bytes(), b.lowWater())
		}
		if due {
			passes++
			if _, err := b.Pass(bg); err != nil {
				t.Fatalf("pass after %d: %v", i, err)
			}
		}
		if got := dirBytes(t, dir); got > soakLimit {
			t.Fatalf("after receipt %d the log holds %d bytes, over its limit %d", i, got, soakLimit)
		}
	}
	if passes == 0 || passes >= n/2 || len(b.Manifest()) == 0 {
		t.Fatalf("%d passes were due over %d receipts, %d segments archived", passes, n, len(b.Manifest()))
	}
	t.Logf("%d of %d seals needed a pass", passes, n)
}

// TestBudgetNeverDeletesUnacknowledged: with no archive directory only
// segments a stream acknowledged whole are removed; until then the log
// fills to its budget and seals are refused with ErrStorage, naming the
// cause, and no receipt is gone.
func TestBudgetNeverDeletesUnacknowledged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	_, l, _ := openTestLog(t, dir, k, soakOptions())
	defer l.Close()
	var acked atomic.Uint64
	b, err := NewBudget(l, BudgetOptions{MaxBytes: soakLimit, Reserve: 4 << 10, Acked: acked.Load, AckedBy: "stream T"})
	if err != nil {
		t.Fatal(err)
	}
	st := New(k, l, Options{Clock: testClock, Admit: b.Admit})
	sealed := 0
	var refusal error
	for i := 0; i < 1000 && refusal == nil; i++ {
		if _, refusal = st.Seal(bg, draft(i)); refusal == nil {
			sealed++
		}
		b.Pass(bg)
		if got := dirBytes(t, dir); got > soakLimit {
			t.Fatalf("log at %d bytes, over %d", got, soakLimit)
		}
	}
	if !errors.Is(refusal, ErrStorage) || !strings.Contains(refusal.Error(), "stream T has not all acknowledged") {
		t.Fatalf("refusal %v", refusal)
	}
	segs, _ := listSegments(dir)
	if segs[0].first != 0 || uint64(sealed) != l.Next() {
		t.Fatalf("with nothing acknowledged the log starts at %d and holds %d of %d", segs[0].first, l.Next(), sealed)
	}

	// Acknowledge part of the log: only segments wholly below it go.
	ack := uint64(sealed / 3)
	acked.Store(ack)
	rep, err := b.Pass(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Moved) == 0 {
		t.Fatal("nothing removed after an acknowledgement")
	}
	for _, a := range rep.Moved {
		if a.Next > ack || a.Path != "" || a.Removed != "stream T" {
			t.Fatalf("removed %+v with only %d acknowledged", a, ack)
		}
	}
	segs, _ = listSegments(dir)
	if segs[0].first > ack {
		t.Fatalf("the live log starts at %d, past the acknowledged %d", segs[0].first, ack)
	}
	if err := b.Admit(); err != nil {
		t.Fatalf("still refused after removal: %v", err)
	}
	if _, err := st.Seal(bg, draft(sealed)); err != nil {
		t.Fatalf("seal after removal: %v", err)
	}
	m, _ := ReadManifest(dir)
	if m[0].First != 0 || m[len(m)-1].Next != segs[0].first {
		t.Fatalf("manifest %+v does not cover up to the live log at %d", m, segs[0].first)
	}
	if _, err := VerifyArchive(bg, dir, t.TempDir(), VerifyOptions{}); err == nil || !strings.Contains(err.Error(), "acknowledged by stream T") {
		t.Fatalf("verify from genesis of a log with removed segments: %v", err)
	}
}

// TestEligibleStopsAtCheckpoint: whatever floor Keep sets, no segment at
// or after the segment of the newest checkpoint at or below it is listed,
// and the log reopens from that checkpoint after they leave.
func TestEligibleStopsAtCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	st, l, _ := openTestLog(t, dir, k, soakOptions())
	for i := 0; i < 300; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatal(err)
		}
	}
	_, cks, _, _ := readCheckpoints(bg, dir, k.Public(), false)
	for _, tc := range []struct {
		name  string
		floor uint64
	}{{"none kept back", 1 << 40}, {"genesis", 0}, {"below the first checkpoint", 15}, {"at a checkpoint", 160}, {"between checkpoints", 170}, {"at the head", 300}} {
		t.Run(tc.name, func(t *testing.T) {
			floor := tc.floor
			b, err := NewBudget(l, BudgetOptions{MaxBytes: soakLimit, ArchiveDir: t.TempDir(), Keep: func() (uint64, error) { return floor, nil }})
			if err != nil {
				t.Fatal(err)
			}
			cands, err := b.Eligible(bg)
			if err != nil {
				t.Fatal(err)
			}
			var cut *SignedCheckpoint
			for _, cp := range cks {
				if cp.Count <= min(floor, l.Durable()) {
					cut = cp
				}
			}
			if cut == nil {
				if len(cands) != 0 {
					t.Fatalf("no checkpoint at or below %d, yet %d candidates", floor, len(cands))
				}
				return
			}
			if len(cands) == 0 && cut.Segment > 0 {
				t.Fatalf("checkpoint %d in segment %d, no candidate", cut.Count, cut.Segment)
			}
			for _, c := range cands {
				if c.Next > cut.Segment {
					t.Fatalf("candidate %d..%d reaches the segment %d of checkpoint %d", c.First, c.Next, cut.Segment, cut.Count)
				}
			}
		})
	}
	b, _ := NewBudget(l, BudgetOptions{MaxBytes: 1, ArchiveDir: t.TempDir(), Keep: func() (uint64, error) { return 170, nil }})
	b.Pass(bg)
	l.Close()
	_, l2, rep := openTestLog(t, dir, k, LogOptions{SegmentBytes: soakSeg, CheckpointEvery: 16, NoSync: true, VisitFrom: ptr(uint64(170))})
	defer l2.Close()
	if rep.Records != 300 || rep.From == nil || rep.From.Count > 170 {
		t.Fatalf("reopen from the kept floor: %+v", rep)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCompressRoundTrip: an archive decompresses to the segment's bytes,
// and a flipped byte in it is caught.
func TestCompressRoundTrip(t *testing.T) {
	dir, seg, _ := writeLog(t, 40)
	orig, _ := os.ReadFile(seg)
	sum, n, err := digestFile(seg)
	if err != nil || n != int64(len(orig)) {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "x.seg.gz")
	if err := compressFile(seg, dst, sum); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(dst)
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(zr)
	f.Close()
	if err != nil || !bytes.Equal(back, orig) {
		t.Fatalf("round trip: %d of %d bytes, %v", len(back), len(orig), err)
	}
	z, _ := os.ReadFile(dst)
	t.Logf("segment %d bytes, archive %d (%.0f %%)", len(orig), len(z), 100*float64(len(z))/float64(len(orig)))
	z[len(z)/2] ^= 1
	os.WriteFile(dst, z, 0o600)
	if err := checkArchive(dst, sum); err == nil {
		t.Fatal("a corrupted archive passed its check")
	}
	if err := compressFile(seg, dst, "00"); err == nil {
		t.Fatal("an archive whose digest does not match was renamed into place")
	}
}

// TestArchiveCrashStates: each state a crash can leave a pass in — a
// temporary archive, an archive complete beside its live segment with or
// without its manifest entry, a damaged archive beside its segment — is
// resolved so that the segment or its complete archive survives, and the
// whole verifies from genesis.
func TestArchiveCrashStates(t *testing.T) {
	for _, tc := range []struct {
		name string
		// crash turns the state after one archived segment into the state
		// the crash left; seg is that segment's original bytes.
		crash   func(t *testing.T, dir, arch string, seg []byte, a Archived)
		refused bool
	}{
		{"temporary archive left", func(t *testing.T, dir, arch string, seg []byte, a Archived) {
			os.WriteFile(filepath.Join(arch, "."+ArchiveName(a.Next)+".tmp123"), []byte("half"), 0o600)
		}, false},
		{"renamed and recorded, segment not removed", func(t *testing.T, dir, arch string, seg []byte, a Archived) {
			os.WriteFile(filepath.Join(dir, SegmentName(a.First)), seg, 0o600)
		}, false},
		{"renamed, not recorded", func(t *testing.T, dir, arch string, seg []byte, a Archived) {
			os.WriteFile(filepath.Join(dir, SegmentName(a.First)), seg, 0o600)
			os.Remove(filepath.Join(dir, manifestName))
		}, false},
		{"recorded but the archive damaged", func(t *testing.T, dir, arch string, seg []byte, a Archived) {
			os.WriteFile(filepath.Join(dir, SegmentName(a.First)), seg, 0o600)
			os.WriteFile(a.Path, []byte("not gzip"), 0o600)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "receipts")
			arch := filepath.Join(t.TempDir(), "archive")
			k := testKey(t)
			st, l, _ := openTestLog(t, dir, k, soakOptions())
			for i := 0; i < 60; i++ {
				if _, err := st.Seal(bg, draft(i)); err != nil {
					t.Fatal(err)
				}
			}
			seg0, _ := os.ReadFile(filepath.Join(dir, SegmentName(0)))
			b, _ := NewBudget(l, BudgetOptions{MaxBytes: 1, ArchiveDir: arch, Keep: func() (uint64, error) { return 30, nil }})
			rep, _ := b.Pass(bg)
			if len(rep.Moved) == 0 || rep.Moved[0].First != 0 {
				t.Fatalf("pass moved %+v", rep.Moved)
			}
			l.Close()
			tc.crash(t, dir, arch, seg0, rep.Moved[0])

			_, l2, _ := openTestLog(t, dir, k, soakOptions())
			defer l2.Close()
			_, err := NewBudget(l2, BudgetOptions{MaxBytes: 1, ArchiveDir: arch})
			if tc.refused {
				if err == nil {
					t.Fatal("a damaged archive was trusted and its segment removed")
				}
				if got, _ := os.ReadFile(filepath.Join(dir, SegmentName(0))); !bytes.Equal(got, seg0) {
					t.Fatal("the segment of a damaged archive is gone")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(arch)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".") {
					t.Fatalf("temporary %s left", e.Name())
				}
			}
			if vr, err := VerifyArchive(bg, dir, arch, VerifyOptions{Trusted: k.Public()}); err != nil || vr.Records != 60 {
				t.Fatalf("verify after the crash: %+v %v", vr, err)
			}
		})
	}
}

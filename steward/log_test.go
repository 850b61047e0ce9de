package steward

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

var bg = context.Background()

func openTestLog(t testing.TB, dir string, k *Key, opt LogOptions) (*Steward, *Log, *ScanReport) {
	t.Helper()
	opt.Key = k
	l, rep, err := OpenLog(bg, dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	return New(k, l, Options{Clock: testClock}), l, rep
}

// writeLog seals n receipts into a new single-segment log and returns its
// directory, its segment file and the byte offsets at which each frame
// starts. Checkpoints are written only on Close.
func writeLog(t testing.TB, n int) (dir, seg string, offs []int64) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1})
	off := int64(len(segmentMagic))
	for i := 0; i < n; i++ {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
		off += int64(framelog.HeaderSize + len(s.Envelope))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, SegmentName(0)), offs
}

func TestLogReopenContinues(t *testing.T) {
	dir, _, _ := writeLog(t, 5)
	k := testKey(t)
	st, l, rep := openTestLog(t, dir, k, LogOptions{})
	if rep.Records != 5 || rep.TornBytes != 0 {
		t.Fatalf("reopen report %+v", rep)
	}
	// Close sealed a checkpoint at 5, so the reopen verified nothing again.
	if rep.From == nil || rep.From.Count != 5 || rep.Verified != 0 {
		t.Fatalf("reopen did not start from the checkpoint: from %+v, verified %d", rep.From, rep.Verified)
	}
	s, err := st.Seal(bg, draft(5))
	if err != nil {
		t.Fatal(err)
	}
	if s.Receipt.Sequence != 5 || *s.Receipt.Prev != rep.Head.String() {
		t.Fatalf("after reopen got sequence %d prev %v, want 5 linking to %s", s.Receipt.Sequence, s.Receipt.Prev, rep.Head)
	}
	l.Close()
	v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
	if err != nil || v.Records != 6 || v.Checkpoints != 2 {
		t.Fatalf("verify after reopen: %v %+v", err, v)
	}
}

// Every ending a power cut can leave is cut by one rule, and nothing else;
// zeros from a frame boundary on are padding, kept for the writer to
// overwrite and cut when it closes.
func TestLogTornTailIsCut(t *testing.T) {
	cases := []struct {
		name string
		pad  bool // the tail is zero padding, not a torn write
		mut  func(b []byte, last int64) []byte
	}{
		{"1 byte of header", false, func(b []byte, last int64) []byte { b[last] = 0x80; return b[:last+1] }},
		{"1 zero byte of header", true, func(b []byte, last int64) []byte { return b[:last+1] }},
		{"11 bytes of header", false, func(b []byte, last int64) []byte { return b[:last+11] }},
		{"header and part of body", false, func(b []byte, last int64) []byte { return b[:last+50] }},
		{"final frame zero-filled", true, func(b []byte, last int64) []byte {
			clear(b[last:])
			return b
		}},
		{"zeros after the last frame", true, func(b []byte, last int64) []byte {
			return append(b[:last], make([]byte, 3<<20)...)
		}},
		{"zeros appended after a cut", false, func(b []byte, last int64) []byte {
			return append(b[:last+30], make([]byte, 4000)...)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, seg, offs := writeLog(t, 4)
			// The checkpoint at 4 would rightly refuse the cut: emptied, as
			// a log that had sealed none yet.
			os.WriteFile(filepath.Join(dir, checkpointsName), []byte(checkpointMagic), 0o600)
			b, _ := os.ReadFile(seg)
			b = c.mut(b, offs[3])
			if err := os.WriteFile(seg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			torn := int64(len(b)) - offs[3]
			if c.pad {
				torn = 0
			}
			k := testKey(t)
			v, err := VerifyLog(bg, dir, VerifyOptions{})
			if err != nil || v.Records != 3 || v.TornBytes != torn {
				t.Fatalf("verify = %v %+v, want 3 records and %d torn bytes", err, v, torn)
			}
			st, l, rep := openTestLog(t, dir, k, LogOptions{})
			if rep.Records != 3 || rep.TornBytes != torn || (torn > 0 && rep.TornAt != offs[3]) {
				t.Fatalf("report %+v, want 3 records and %d torn bytes at %d", rep, torn, offs[3])
			}
			size := offs[3] // a torn tail is cut on open; padding is kept
			if c.pad {
				size = int64(len(b))
			}
			if fi, _ := os.Stat(seg); fi.Size() != size {
				t.Fatalf("after open: size %d, want %d", fi.Size(), size)
			}
			s, err := st.Seal(bg, draft(9))
			if err != nil || s.Receipt.Sequence != 3 {
				t.Fatalf("append after recovery: %v seq %v", err, s)
			}
			l.Close()
			if v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()}); err != nil || v.Records != 4 || v.TornBytes != 0 {
				t.Fatalf("verify after recovery: %v %+v", err, v)
			}
			// Closed, the segment ends at its last frame.
			if fi, _ := os.Stat(seg); fi.Size() != offs[3]+int64(len(s.Envelope))+framelog.HeaderSize {
				t.Fatalf("after close: size %d, want %d", fi.Size(), offs[3]+int64(len(s.Envelope))+framelog.HeaderSize)
			}
		})
	}
}

// A bit flipped in any frame's length, or any other damage but a torn tail,
// refuses to open, names the sequence, and truncates nothing.
func TestLogDamageRefused(t *testing.T) {
	dir, seg, offs := writeLog(t, 6)
	orig, _ := os.ReadFile(seg)
	ck, _ := os.ReadFile(filepath.Join(dir, checkpointsName))
	frame := func(i int) []byte {
		end := int64(len(orig))
		if i+1 < len(offs) {
			end = offs[i+1]
		}
		return orig[offs[i]:end]
	}
	splice := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	flip := func(at int64, bit byte) []byte {
		b := bytes.Clone(orig)
		b[at] ^= bit
		return b
	}
	type tc struct {
		name    string
		content []byte
		seq     uint64
	}
	var cases []tc
	for i := range offs {
		for _, byteAt := range []int64{0, 1, 2, 3} {
			cases = append(cases, tc{fmt.Sprintf("length byte %d of record %d", byteAt, i), flip(offs[i]+byteAt, 0x04), uint64(i)})
		}
	}
	cases = append(cases,
		tc{"flipped byte in record 3 body", flip(offs[3]+40, 0x20), 3},
		tc{"flipped byte in the final record's body", flip(offs[5]+60, 0x01), 5},
		tc{"flipped header checksum of record 1", flip(offs[1]+9, 0x01), 1},
		tc{"record 2 truncated in the middle of the log", splice(orig[:offs[2]+30], orig[offs[3]:]), 2},
		tc{"record 2 removed", splice(orig[:offs[2]], orig[offs[3]:]), 2},
		tc{"records 3 and 4 swapped", splice(orig[:offs[3]], frame(4), frame(3), orig[offs[5]:]), 3},
		tc{"record 1 duplicated", splice(orig[:offs[2]], frame(1), orig[offs[2]:]), 2},
		tc{"record 4 zeroed, record 5 intact", func() []byte { b := bytes.Clone(orig); clear(b[offs[4]:offs[5]]); return b }(), 4},
		tc{"bad magic", splice([]byte("NOTALOG!"), orig[8:]), 0},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "bad")
			os.Mkdir(d, 0o755)
			p := filepath.Join(d, SegmentName(0))
			if err := os.WriteFile(p, c.content, 0o644); err != nil {
				t.Fatal(err)
			}
			// Opening from genesis refuses; (opening from the checkpoint at
			// 6 trusts what it covers, which is the checkpoint's point).
			os.WriteFile(filepath.Join(d, checkpointsName), ck, 0o644)
			_, _, err := OpenLog(bg, d, LogOptions{Full: true})
			var de *DamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("OpenLog = %v, want a DamageError", err)
			}
			if de.Sequence != c.seq {
				t.Fatalf("damage named sequence %d, want %d (%v)", de.Sequence, c.seq, err)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, c.content) {
				t.Fatal("a damaged log was modified on open")
			}
			// meshctl verify walks everything from genesis, checkpoints or not.
			_, err = VerifyLog(bg, d, VerifyOptions{})
			if !errors.As(err, &de) || de.Sequence != c.seq {
				t.Fatalf("VerifyLog = %v, want damage at %d", err, c.seq)
			}
		})
	}
}

func TestLogLockedAgainstSecondWriter(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{})
	_, _, err := OpenLog(bg, dir, LogOptions{Key: k})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	if want := fmt.Sprintf("pid %d", os.Getpid()); !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("lock error %q does not name the holder (%s)", err, want)
	}
	if _, err := st.Seal(bg, draft(1)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// The lock goes with Close.
	_, l2, rep := openTestLog(t, dir, k, LogOptions{})
	defer l2.Close()
	if rep.Records != 1 {
		t.Fatalf("reopen after close: %+v", rep)
	}
}

func TestLogRefusesForeignSteward(t *testing.T) {
	dir, _, _ := writeLog(t, 2)
	other, _ := GenerateKey(rand.Reader)
	if _, _, err := OpenLog(bg, dir, LogOptions{Trusted: other.Public(), Full: true}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("log opened under another trusted steward: %v", err)
	}
	if _, _, err := OpenLog(bg, dir, LogOptions{Key: other}); err == nil {
		t.Fatal("another steward's key opened the log for appending")
	}
	// Opened without a key, a steward with another key may still not append.
	l, _, err := OpenLog(bg, dir, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := New(other, l, Options{}).Seal(bg, draft(3)); !errors.Is(err, ErrForeignSteward) {
		t.Fatalf("appended under another key: %v", err)
	}
	if l.Next() != 2 {
		t.Fatalf("refused append consumed a sequence: next %d", l.Next())
	}
}

func TestLogPathMustBeRegular(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	if _, _, err := OpenLog(bg, file, LogOptions{}); err == nil {
		t.Fatal("opened a regular file as a log directory")
	}
	fifoDir := filepath.Join(base, "fifo")
	os.Mkdir(fifoDir, 0o755)
	if err := syscall.Mkfifo(filepath.Join(fifoDir, SegmentName(0)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Would block forever reading a FIFO; must refuse at once instead.
	if _, _, err := OpenLog(bg, fifoDir, LogOptions{}); err == nil {
		t.Fatal("opened a FIFO segment")
	}
	if _, err := VerifyLog(bg, filepath.Join(fifoDir, SegmentName(0)), VerifyOptions{}); err == nil {
		t.Fatal("verified a FIFO")
	}
}

func TestBuildErrorConsumesNoSequence(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r"), k, LogOptions{})
	defer l.Close()
	bad := draft(0)
	bad.Energy = wire.Energy{}
	if _, err := st.Seal(bg, bad); err == nil {
		t.Fatal("sealed a zero energy")
	}
	s, err := st.Seal(bg, draft(1))
	if err != nil || s.Receipt.Sequence != 0 {
		t.Fatalf("sequence after refused seal: %v %v", err, s)
	}
}

func TestConcurrentSealersGroupCommit(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: 50, SegmentBytes: 16 << 10})
	const sealers, each = 32, 10
	seqs := make(chan uint64, sealers*each)
	var wg sync.WaitGroup
	for g := 0; g < sealers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s, err := st.Seal(bg, draft(g*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- s.Receipt.Sequence
			}
		}(g)
	}
	wg.Wait()
	close(seqs)
	seen := make([]bool, sealers*each)
	for s := range seqs {
		if s >= uint64(len(seen)) || seen[s] {
			t.Fatalf("sequence %d duplicated or out of range", s)
		}
		seen[s] = true
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
	if err != nil || v.Records != sealers*each {
		t.Fatalf("verify: %v (%+v)", err, v)
	}
	// How many periodic checkpoints land depends on scheduling (a sealer
	// that finds one in progress leaves it to the next), but the first
	// sealer past 50 takes one, and Close seals another.
	if v.Segments < 5 || v.Checkpoints < 2 {
		t.Fatalf("expected rotation and periodic checkpoints: %d segments, %d checkpoints", v.Segments, v.Checkpoints)
	}
}

// Segments rotate; archived old segments still verify from a checkpoint.
func TestSegmentsAndCheckpointAnchor(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{SegmentBytes: 4 << 10, CheckpointEvery: 10})
	for i := 0; i < 60; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatal(err)
		}
	}
	mid, err := l.Checkpoint(bg)
	if err != nil || mid.Count != 60 {
		t.Fatalf("checkpoint: %v %+v", err, mid)
	}
	for i := 60; i < 80; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	segs, _ := listSegments(dir)
	if len(segs) < 4 {
		t.Fatalf("%d segments: the log did not rotate", len(segs))
	}
	full, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
	if err != nil || full.Records != 80 {
		t.Fatalf("verify: %v %+v", err, full)
	}
	// Archive every segment before the one holding the checkpoint's head.
	archive := t.TempDir()
	for _, s := range segs {
		if s.first < mid.Segment {
			os.Rename(s.path, filepath.Join(archive, filepath.Base(s.path)))
		}
	}
	if _, err := VerifyLog(bg, dir, VerifyOptions{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("verified from genesis without the archived segments: %v", err)
	}
	anchored, err := VerifyLog(bg, dir, VerifyOptions{Anchor: mid, ExpectHead: &full.Head})
	if err != nil || anchored.Records != 80 || anchored.Verified != 20 {
		t.Fatalf("anchored verify: %v %+v", err, anchored)
	}
	// The steward reopens from its newest checkpoint, so it never needs them.
	_, l2, rep := openTestLog(t, dir, k, LogOptions{})
	l2.Close()
	if rep.Records != 80 || rep.Verified != 0 {
		t.Fatalf("reopen: %+v", rep)
	}
}

// A checkpoint that does not describe its log, or a log rolled back
// behind a checkpoint or a pinned head, is caught.
func TestCheckpointTamperAndRollback(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1})
	var heads []wire.ContentID
	for i := 0; i < 10; i++ {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, s.ID)
	}
	l.Close()
	seg := filepath.Join(dir, SegmentName(0))
	ckPath := filepath.Join(dir, checkpointsName)
	orig, _ := os.ReadFile(seg)
	ck, _ := os.ReadFile(ckPath)

	// A checkpoint forged with a head that is not in the log, signed by
	// the right key: the open must check it against the log.
	cp, err := sealCheckpoint(k, Checkpoint{Count: 10, Head: heads[3].String(), Segment: 0, HeadOffset: 8, End: 100})
	if err != nil {
		t.Fatal(err)
	}
	forged := framelog.AppendFrame([]byte(checkpointMagic), cp.Envelope)
	os.WriteFile(ckPath, forged, 0o644)
	if _, _, err := OpenLog(bg, dir, LogOptions{Key: k}); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("open with a forged checkpoint: %v", err)
	}
	if _, err := VerifyLog(bg, dir, VerifyOptions{}); !errors.Is(err, ErrCheckpoint) {
		t.Fatalf("verify with a forged checkpoint: %v", err)
	}
	// A checkpoint byte flipped: its signature fails.
	bad := bytes.Clone(ck)
	bad[len(bad)-10] ^= 1
	os.WriteFile(ckPath, bad, 0o644)
	if _, _, err := OpenLog(bg, dir, LogOptions{Key: k}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open with a tampered checkpoint: %v", err)
	}
	os.WriteFile(ckPath, ck, 0o644)

	// Rolled back to 7 receipts: the checkpoint at 10 says so.
	var offs []int64
	off := int64(len(segmentMagic))
	for off < int64(len(orig)) {
		offs = append(offs, off)
		n := int64(orig[off])<<24 | int64(orig[off+1])<<16 | int64(orig[off+2])<<8 | int64(orig[off+3])
		off += framelog.HeaderSize + n
	}
	os.WriteFile(seg, orig[:offs[7]], 0o644)
	if _, _, err := OpenLog(bg, dir, LogOptions{Key: k}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("open of a rolled-back log: %v", err)
	}
	if _, err := VerifyLog(bg, dir, VerifyOptions{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("verify of a rolled-back log: %v", err)
	}
	// Without its checkpoints, whoever kept the head or the count catches it.
	os.Remove(ckPath)
	if _, err := VerifyLog(bg, dir, VerifyOptions{ExpectHead: &heads[9]}); !errors.Is(err, ErrPinned) {
		t.Fatalf("pinned head not enforced: %v", err)
	}
	if _, err := VerifyLog(bg, dir, VerifyOptions{ExpectCount: 10}); !errors.Is(err, ErrPinned) {
		t.Fatalf("pinned count not enforced: %v", err)
	}
	if v, err := VerifyLog(bg, dir, VerifyOptions{ExpectHead: &heads[5], ExpectCount: 7}); err != nil || v.Records != 7 {
		t.Fatalf("pins that hold were refused: %v", err)
	}
}

func TestVerifyHonoursCancellation(t *testing.T) {
	dir, _, _ := writeLog(t, 600)
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := VerifyLog(ctx, dir, VerifyOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("verify with a cancelled context: %v", err)
	}
	if _, _, err := OpenLog(ctx, dir, LogOptions{Full: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled context: %v", err)
	}
}

// Repair is explicit: it reports without -apply, and with it quarantines
// the damaged record and everything after, keeping the verified prefix.
func TestRepairLog(t *testing.T) {
	dir, seg, offs := writeLog(t, 6)
	orig, _ := os.ReadFile(seg)
	bad := bytes.Clone(orig)
	bad[offs[3]+40] ^= 0x20
	os.WriteFile(seg, bad, 0o644)

	rep, err := RepairLog(bg, dir, nil, false)
	if err != nil || rep.Damage == nil || rep.Damage.Sequence != 3 || rep.Applied || rep.CheckpointsDropped != 1 {
		t.Fatalf("dry run: %v %+v", err, rep)
	}
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, bad) {
		t.Fatal("a dry run changed the log")
	}
	rep, err = RepairLog(bg, dir, nil, true)
	if err != nil || !rep.Applied || rep.Records != 3 {
		t.Fatalf("repair: %v %+v", err, rep)
	}
	moved, err := os.ReadFile(filepath.Join(rep.Quarantine, SegmentName(0)))
	if err != nil || !bytes.Equal(moved, bad[offs[3]:]) {
		t.Fatalf("quarantined bytes differ from the cut: %v", err)
	}
	k := testKey(t)
	st, l, orep := openTestLog(t, dir, k, LogOptions{})
	if orep.Records != 3 {
		t.Fatalf("after repair the log holds %d receipts, want 3", orep.Records)
	}
	if s, err := st.Seal(bg, draft(7)); err != nil || s.Receipt.Sequence != 3 {
		t.Fatalf("append after repair: %v", err)
	}
	l.Close()
	if v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()}); err != nil || v.Records != 4 {
		t.Fatalf("verify after repair: %v", err)
	}
}

// The segment being written is kept preallocated, so a receipt's fsync
// does not grow it; a rotated segment ends at its last frame; a crash
// leaves the padding, which verifies clean and is reopened without a torn
// tail.
func TestLogPreallocatesSegment(t *testing.T) {
	const chunk, segBytes = 2048, 6000
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, SegmentBytes: segBytes, Preallocate: chunk})
	defer l.Close()
	sizeOf := func(path string) int64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	var ends []int64 // each segment's frames' end, as sealed
	end := int64(len(segmentMagic))
	seg := uint64(0)
	for i := 0; i < 30; i++ {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		if l.seg != seg {
			ends, seg, end = append(ends, end), l.seg, int64(len(segmentMagic))
		}
		end += int64(framelog.HeaderSize + len(s.Envelope))
	}
	if len(ends) < 2 {
		t.Fatalf("the log rotated %d times, want at least 2", len(ends))
	}
	segs, err := listSegments(dir)
	if err != nil || len(segs) != len(ends)+1 {
		t.Fatalf("segments %v (%v), want %d", segs, err, len(ends)+1)
	}
	for i, e := range ends {
		if got := sizeOf(segs[i].path); got != e {
			t.Errorf("rotated segment %s is %d bytes, want its frames' %d", segs[i].path, got, e)
		}
	}
	live := SegmentName(l.seg)
	// Whole chunks past the frames, but not past the segment size.
	if got, want := sizeOf(filepath.Join(dir, live)), min((end+chunk-1)/chunk*chunk, max(segBytes, end)); got != want || got == end {
		t.Fatalf("the segment being written is %d bytes (frames end at %d), want %d", got, end, want)
	}
	// Read while written, and as a crash leaves it: the padding is not a
	// torn write.
	v, err := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
	if err != nil || v.Records != 30 || v.TornBytes != 0 {
		t.Fatalf("verify of the live log: %v %+v", err, v)
	}
	crashed := filepath.Join(t.TempDir(), "crashed")
	if err := os.MkdirAll(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(crashed, e.Name()), b, 0o600)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	st2, l2, rep := openTestLog(t, crashed, k, LogOptions{CheckpointEvery: -1, SegmentBytes: segBytes, Preallocate: chunk})
	if rep.Records != 30 || rep.TornBytes != 0 {
		t.Fatalf("reopen after a crash: %+v, want 30 records and nothing torn", rep)
	}
	s, err := st2.Seal(bg, draft(30))
	if err != nil || s.Receipt.Sequence != 30 {
		t.Fatalf("seal after the crash: %v %v", err, s)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	// Closed, every segment ends at its last frame.
	segs, err = listSegments(crashed)
	if err != nil {
		t.Fatal(err)
	}
	for _, sg := range segs {
		f, err := os.Open(sg.path)
		if err != nil {
			t.Fatal(err)
		}
		tail, err := segFormat.Scan(bg, f, func(uint64, int64, []byte) error { return nil })
		f.Close()
		if got := sizeOf(sg.path); err != nil || tail != (framelog.Tail{End: got}) {
			t.Fatalf("closed, segment %s is %d bytes with tail %+v (%v), want nothing after its frames", sg.path, got, tail, err)
		}
	}
	if v, err := VerifyLog(bg, crashed, VerifyOptions{Trusted: k.Public()}); err != nil || v.Records != 31 {
		t.Fatalf("verify after the crash and a close: %v %+v", err, v)
	}
}

// A segment that is not the last holds nothing after its last frame, not
// even zeros: the rotation cut them before the next segment existed.
func TestLogPaddingInAnOlderSegmentIsDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, SegmentBytes: 2000})
	for i := 0; i < 6; i++ {
		if _, err := st.Seal(bg, draft(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	segs, err := listSegments(dir)
	if err != nil || len(segs) < 2 {
		t.Fatalf("segments %v %v", segs, err)
	}
	f, err := os.OpenFile(segs[0].path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 100))
	f.Close()
	_, err = VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
	var de *DamageError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "100 bytes of zeros after the last frame of a segment that is not the last") {
		t.Fatalf("verify = %v, want the zeros named as damage", err)
	}
}

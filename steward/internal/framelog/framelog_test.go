package framelog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

var testFormat = Format{Magic: "TESTMAGC", MaxBody: 600}

// file is the magic and three frames with bodies of 10, 20 and 500 bytes;
// the last one ends at byte 8+22+32+512 = 574, its body starts at 62.
func file() []byte {
	b := []byte(testFormat.Magic)
	for _, n := range []int{10, 20, 500} {
		b = AppendFrame(b, bytes.Repeat([]byte{byte(n)}, n))
	}
	return b
}

func scan(t *testing.T, b []byte) (Tail, int, error) {
	t.Helper()
	n := 0
	tail, err := testFormat.Scan(context.Background(), bytes.NewReader(b), func(uint64, int64, []byte) error {
		n++
		return nil
	})
	return tail, n, err
}

func TestScanTornAndCorrupt(t *testing.T) {
	good := file()
	const last = 62 // header of the 500-byte frame
	tests := []struct {
		name   string
		mutate func([]byte) []byte
		end    int64 // for a torn tail
		torn   int64
		zero   int64 // padding, for an all-zero tail from a frame boundary
		frames int
		index  int64 // for corruption; -1 when torn
		offset int64
	}{
		{"intact", func(b []byte) []byte { return b }, 574, 0, 0, 3, -1, 0},
		{"empty", func([]byte) []byte { return nil }, 0, 0, 0, 0, -1, 0},
		{"magic prefix", func(b []byte) []byte { return b[:5] }, 0, 5, 0, 0, -1, 0},
		{"zero file", func(b []byte) []byte { return make([]byte, 100) }, 0, 100, 0, 0, -1, 0},
		{"partial header", func(b []byte) []byte { return append(b, 1, 2, 3) }, 574, 3, 0, 3, -1, 0},
		{"partial header of zeros", func(b []byte) []byte { return append(b, 0, 0, 0) }, 574, 0, 3, 3, -1, 0},
		{"partial header, zero after a byte", func(b []byte) []byte { return append(b, 0, 7, 0) }, 574, 3, 0, 3, -1, 0},
		{"body past the end", func(b []byte) []byte { return b[:len(b)-1] }, last, 511, 0, 2, -1, 0},
		{"zeros after", func(b []byte) []byte { return append(b, make([]byte, 40)...) }, 574, 0, 40, 3, -1, 0},
		{"zeros after, longer than a chunk", func(b []byte) []byte { return append(b, make([]byte, 3<<16)...) }, 574, 0, 3 << 16, 3, -1, 0},
		{"a byte in the zeros", func(b []byte) []byte { z := make([]byte, 4000); z[3000] = 1; return append(b, z...) }, 0, 0, 0, 0, 3, 574},
		{"body zero from a sector", func(b []byte) []byte { clear(b[512:]); return b }, last, 512, 0, 2, -1, 0},
		{"body zero but not to a sector", func(b []byte) []byte { clear(b[513:]); b[512] = 1; return b }, 0, 0, 0, 0, 2, last},
		{"body damaged mid-sector", func(b []byte) []byte { b[100] ^= 1; return b }, 0, 0, 0, 0, 2, last},
		{"length damaged", func(b []byte) []byte { b[8+3] ^= 1; return b }, 0, 0, 0, 0, 0, 8},
		{"frame after a damaged one", func(b []byte) []byte { b[30+12] ^= 1; return b }, 0, 0, 0, 0, 1, 30},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, 0, 0, 0, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tail, n, err := scan(t, tc.mutate(bytes.Clone(good)))
			if tc.index >= 0 {
				var ce *CorruptError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Index != uint64(tc.index) || ce.Offset != tc.offset {
					t.Fatalf("scan: %v, want corruption at frame %d, offset %d", err, tc.index, tc.offset)
				}
				return
			}
			if err != nil || tail != (Tail{End: tc.end, Torn: tc.torn, Zero: tc.zero}) || n != tc.frames {
				t.Fatalf("scan: %+v, %d frames, %v; want end %d, torn %d, zero %d, %d frames", tail, n, err, tc.end, tc.torn, tc.zero, tc.frames)
			}
		})
	}
}

func TestOpenAppendCutsAndResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	good := file()
	if err := os.WriteFile(path, append(bytes.Clone(good), 0, 9, 0, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	w, tail, err := testFormat.OpenAppend(context.Background(), path, false, func(uint64, int64, []byte) error { return nil })
	if err != nil || tail.Torn != 4 {
		t.Fatalf("open: %+v, %v", tail, err)
	}
	end, err := w.Enqueue([]byte("next"))
	if err != nil || end.End != int64(len(good))+HeaderSize+4 {
		t.Fatalf("enqueue: %d, %v", end.End, err)
	}
	if err := w.Sync(end); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := AppendFrame(bytes.Clone(good), []byte("next")); !bytes.Equal(b, want) {
		t.Fatalf("file after cut and append differs")
	}
	if _, err := w.Enqueue([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
}

func TestWriterGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	w, _, err := testFormat.OpenAppend(context.Background(), path, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end, err := w.Enqueue([]byte(fmt.Sprint(i)))
			if err == nil {
				err = w.Sync(end)
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if s := w.Syncs(); s == 0 || s > n {
		t.Fatalf("%d fsyncs for %d frames", s, n)
	}
	w.Close()
	f, _ := os.Open(path)
	defer f.Close()
	frames := 0
	tail, err := testFormat.Scan(context.Background(), f, func(uint64, int64, []byte) error { frames++; return nil })
	if err != nil || frames != n || tail.Torn != 0 {
		t.Fatalf("reread: %d frames, %+v, %v", frames, tail, err)
	}
}

// A header cut at a sector boundary, zeros after: torn, not corruption.
func TestHeaderCutAtSectorIsTorn(t *testing.T) {
	f := Format{Magic: "TESTMAG1", MaxBody: 4096}
	// One frame sized so that the next header starts 5 bytes before a
	// sector boundary.
	b := AppendFrame([]byte(f.Magic), make([]byte, 512-5-len(f.Magic)-HeaderSize))
	valid := len(b)
	b = AppendFrame(b, []byte("the last frame, torn inside its header"))
	clear(b[512:])
	tail, err := f.Scan(context.Background(), bytes.NewReader(b), func(uint64, int64, []byte) error { return nil })
	if err != nil || tail.End != int64(valid) || tail.Torn != int64(len(b)-valid) {
		t.Fatalf("scan = %+v, %v; want a torn tail at %d", tail, err, valid)
	}
	// The same header damaged but not zeroed is corruption.
	b[512] = 1
	if _, err := f.Scan(context.Background(), bytes.NewReader(b), func(uint64, int64, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scan of a damaged header = %v, want corruption", err)
	}
}

// A failed write fails every frame not yet durable; Recover cuts them off
// (ErrDiscarded from then on, even for a waiter that asks later), keeps
// every durable one, and appends resume at the cut.
func TestWriterRecover(t *testing.T) {
	for _, f := range []Fault{{Err: syscall.ENOSPC}, {Err: syscall.ENOSPC, Short: 13}, {Err: syscall.EIO, Short: 1 << 20}} {
		t.Run(fmt.Sprint(f), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			var x Faults
			of, err := OpenFile(path, true)
			if err != nil {
				t.Fatal(err)
			}
			w, err := testFormat.Resume(x.Wrap(of), Tail{}, false)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := w.Enqueue([]byte("durable"))
			if err := w.Sync(a); err != nil {
				t.Fatal(err)
			}
			writes, _ := x.Counts()
			x.FailWrite(writes+1, f)
			b, _ := w.Enqueue([]byte("refused one"))
			c, _ := w.Enqueue([]byte("refused two"))
			if err := w.Sync(b); !errors.Is(err, ErrStorage) || !errors.Is(err, f.Err) {
				t.Fatalf("sync of the refused frame: %v", err)
			}
			if _, err := w.Enqueue([]byte("x")); !errors.Is(err, ErrStorage) {
				t.Fatalf("enqueue on a failed writer: %v", err)
			}
			if cut, err := w.Recover(); !cut || err != nil {
				t.Fatalf("recover: %v %v", cut, err)
			}
			if cut, err := w.Recover(); cut || err != nil {
				t.Fatalf("second recover: %v %v", cut, err)
			}
			d, _ := w.Enqueue([]byte("after, longer than both refused frames together"))
			if err := w.Sync(d); err != nil {
				t.Fatal(err)
			}
			// The new frame ends past c's offset: only the epoch tells that
			// c is not durable.
			if d.End < c.End {
				t.Fatalf("test frames too short: %d vs %d", d.End, c.End)
			}
			if err := w.Sync(c); !errors.Is(err, ErrDiscarded) {
				t.Fatalf("late sync of a discarded frame: %v", err)
			}
			if err := w.Sync(a); err != nil {
				t.Fatalf("late sync of a durable frame: %v", err)
			}
			w.Close()
			var got []string
			rf, _ := os.Open(path)
			defer rf.Close()
			tail, err := testFormat.Scan(context.Background(), rf, func(_ uint64, _ int64, body []byte) error {
				got = append(got, string(body))
				return nil
			})
			if err != nil || tail.Torn != 0 || fmt.Sprint(got) != "[durable after, longer than both refused frames together]" {
				t.Fatalf("file holds %q, tail %+v, err %v", got, tail, err)
			}
		})
	}
}

// fileSize is path's size on disk.
func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A preallocating writer keeps zeros ahead of its frames in whole chunks; a
// crash leaves them as padding (not torn), which a reopened writer
// overwrites; Trim and Close cut them, leaving exactly the frames.
func TestWriterPreallocates(t *testing.T) {
	const chunk = 4096
	path := filepath.Join(t.TempDir(), "f")
	open := func() (*Writer, Tail) {
		t.Helper()
		w, tail, err := testFormat.OpenAppend(context.Background(), path, false, func(uint64, int64, []byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		w.Preallocate(chunk, 1<<40)
		return w, tail
	}
	want := []byte(testFormat.Magic)
	put := func(w *Writer, body []byte) {
		t.Helper()
		m, err := w.Enqueue(body)
		if err == nil {
			err = w.Sync(m)
		}
		if err != nil {
			t.Fatal(err)
		}
		want = AppendFrame(want, body)
	}
	w, _ := open()
	put(w, bytes.Repeat([]byte{1}, 100))
	if got := fileSize(t, path); got != chunk {
		t.Fatalf("after one frame the file is %d bytes, want one chunk of %d", got, chunk)
	}
	// A crash: the writer is never closed, a second one opens the file.
	w2, tail := open()
	if tail != (Tail{End: int64(len(want)), Zero: chunk - int64(len(want))}) {
		t.Fatalf("reopened tail %+v, want end %d and the rest of the chunk as padding", tail, len(want))
	}
	for i := 0; i < 12; i++ {
		put(w2, bytes.Repeat([]byte{byte(i + 2)}, 500))
	}
	if got := fileSize(t, path); got != 2*chunk {
		t.Fatalf("after %d bytes of frames the file is %d bytes, want two chunks", len(want), got)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b[:len(want)], want) || !allZero(b[len(want):]) {
		t.Fatal("the file is not the frames followed by zeros")
	}
	if err := w2.Trim(); err != nil {
		t.Fatal(err)
	}
	if got := fileSize(t, path); got != int64(len(want)) {
		t.Fatalf("after Trim the file is %d bytes, want %d", got, len(want))
	}
	put(w2, []byte("after the trim"))
	if got := fileSize(t, path); got != 2*chunk {
		t.Fatalf("an append after Trim left %d bytes, want the chunk allocated again", got)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	_ = w // the crashed writer: never closed, as a crash leaves it
	if b, _ := os.ReadFile(path); !bytes.Equal(b, want) {
		t.Fatalf("after Close the file is %d bytes, want exactly the %d of the frames", len(b), len(want))
	}
}

// Preallocation is best effort: a full disk refusing the zeros leaves the
// frame to its own write, which decides.
func TestWriterPreallocationRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	var x Faults
	of, err := OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	w, err := testFormat.Resume(x.Wrap(of), Tail{}, false)
	if err != nil {
		t.Fatal(err)
	}
	w.Preallocate(1<<20, 1<<40)
	writes, _ := x.Counts()
	x.FailWrite(writes+1, Fault{Err: syscall.ENOSPC, Short: 100})
	m, _ := w.Enqueue([]byte("kept"))
	if err := w.Sync(m); err != nil {
		t.Fatalf("a frame after refused zeros: %v", err)
	}
	if n, _ := x.Counts(); n != writes+2 {
		t.Fatalf("%d writes, want the refused zeros and the frame", n-writes)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, AppendFrame([]byte(testFormat.Magic), []byte("kept"))) {
		t.Fatalf("file holds %q", b)
	}
}

// Without fsync there is nothing to save: the writer does not preallocate.
func TestWriterNoSyncDoesNotPreallocate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	w, _, err := testFormat.OpenAppend(context.Background(), path, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Preallocate(4096, 1<<40)
	m, _ := w.Enqueue([]byte("x"))
	if err := w.Sync(m); err != nil {
		t.Fatal(err)
	}
	if got, want := fileSize(t, path), int64(len(testFormat.Magic)+HeaderSize+1); got != want {
		t.Fatalf("file is %d bytes, want %d", got, want)
	}
	w.Close()
}

// Preallocation stops at its limit (a segment's size), except where a
// frame itself ends past it.
func TestWriterPreallocationLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	w, _, err := testFormat.OpenAppend(context.Background(), path, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Preallocate(1<<20, 1000)
	put := func(n int) {
		t.Helper()
		m, err := w.Enqueue(bytes.Repeat([]byte{7}, n))
		if err == nil {
			err = w.Sync(m)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	put(100)
	if got := fileSize(t, path); got != 1000 || w.Footprint() != 1000 {
		t.Fatalf("file is %d bytes (footprint %d), want the limit of 1000", got, w.Footprint())
	}
	put(500)
	put(500) // ends past the limit
	want := int64(len(testFormat.Magic) + 3*HeaderSize + 1100)
	if got := fileSize(t, path); got != want || w.Footprint() != want || w.Size() != want {
		t.Fatalf("file is %d bytes (footprint %d, size %d), want exactly the frames' %d", got, w.Footprint(), w.Size(), want)
	}
}

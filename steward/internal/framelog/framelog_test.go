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
		frames int
		index  int64 // for corruption; -1 when torn
		offset int64
	}{
		{"intact", func(b []byte) []byte { return b }, 574, 0, 3, -1, 0},
		{"empty", func([]byte) []byte { return nil }, 0, 0, 0, -1, 0},
		{"magic prefix", func(b []byte) []byte { return b[:5] }, 0, 5, 0, -1, 0},
		{"zero file", func(b []byte) []byte { return make([]byte, 100) }, 0, 100, 0, -1, 0},
		{"partial header", func(b []byte) []byte { return append(b, 1, 2, 3) }, 574, 3, 3, -1, 0},
		{"body past the end", func(b []byte) []byte { return b[:len(b)-1] }, last, 511, 2, -1, 0},
		{"zeros after", func(b []byte) []byte { return append(b, make([]byte, 40)...) }, 574, 40, 3, -1, 0},
		{"body zero from a sector", func(b []byte) []byte { clear(b[512:]); return b }, last, 512, 2, -1, 0},
		{"body zero but not to a sector", func(b []byte) []byte { clear(b[513:]); b[512] = 1; return b }, 0, 0, 0, 2, last},
		{"body damaged mid-sector", func(b []byte) []byte { b[100] ^= 1; return b }, 0, 0, 0, 2, last},
		{"length damaged", func(b []byte) []byte { b[8+3] ^= 1; return b }, 0, 0, 0, 0, 8},
		{"frame after a damaged one", func(b []byte) []byte { b[30+12] ^= 1; return b }, 0, 0, 0, 1, 30},
		{"bad magic", func(b []byte) []byte { b[0] = 'X'; return b }, 0, 0, 0, 0, 0},
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
			if err != nil || tail != (Tail{End: tc.end, Torn: tc.torn}) || n != tc.frames {
				t.Fatalf("scan: %+v, %d frames, %v; want end %d, torn %d, %d frames", tail, n, err, tc.end, tc.torn, tc.frames)
			}
		})
	}
}

func TestOpenAppendCutsAndResumes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	good := file()
	if err := os.WriteFile(path, append(bytes.Clone(good), 0, 0, 0, 0), 0o644); err != nil {
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

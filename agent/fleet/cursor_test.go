package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCursorFile(t *testing.T) {
	id := strings.Repeat("cd", 32)
	// newest is the offset of the slot the last write went to, for
	// damaging it.
	newest := func(t *testing.T, path string) int64 {
		_, gen, err := readCursorGen(path)
		if err != nil {
			t.Fatal(err)
		}
		return int64(gen%2) * cursorSlot
	}
	damage := func(t *testing.T, path string, off int64) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteAt([]byte("9"), off+int64(len(cursorMagic))+4); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		// before is the file's content before the writes (nil: none).
		before []byte
		writes []uint64
		after  func(t *testing.T, path string)
		want   uint64
		err    string
	}{
		{name: "missing", want: 0},
		{name: "one write", writes: []uint64{5}, want: 5},
		{name: "many writes", writes: []uint64{1, 2, 3, 4, 5, 6, 7}, want: 7},
		{name: "a cursor moved back", writes: []uint64{9, 3}, want: 3},
		{name: "JSON format read", before: []byte(`{"steward":"` + id + `","next":12}` + "\n"), want: 12},
		{name: "JSON format replaced", before: []byte(`{"steward":"` + id + `","next":12}`), writes: []uint64{14, 15}, want: 15},
		{name: "damaged file replaced", before: []byte("{not json"), writes: []uint64{3}, want: 3},
		{name: "torn newest slot: the older counts", writes: []uint64{4, 8, 12},
			after: func(t *testing.T, path string) { damage(t, path, newest(t, path)) }, want: 8},
		{name: "torn older slot", writes: []uint64{4, 8, 12},
			after: func(t *testing.T, path string) { damage(t, path, cursorSlot-newest(t, path)) }, want: 12},
		{name: "both slots torn", writes: []uint64{4, 8},
			after: func(t *testing.T, path string) { damage(t, path, 0); damage(t, path, cursorSlot) }, err: "no valid slot"},
		{name: "only one slot ever written, torn", writes: []uint64{4},
			after: func(t *testing.T, path string) { damage(t, path, newest(t, path)) }, err: "checksum mismatch"},
		{name: "truncated", writes: []uint64{4, 8},
			after: func(t *testing.T, path string) { os.Truncate(path, 20) }, err: "no valid slot"},
		{name: "not a cursor", before: []byte("hello\n"), err: "no checksum"},
		{name: "empty", before: []byte{}, err: "no valid slot"},
		{name: "too big", before: []byte(strings.Repeat(" ", maxCursorFile+1)), err: "not a cursor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cursor")
			if c.before != nil {
				if err := os.WriteFile(path, c.before, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if len(c.writes) > 0 {
				// The first through writeCursor (which opens and closes),
				// the rest on one open file, as the publisher does.
				if err := writeCursor(path, cursor{Steward: id, Next: c.writes[0]}); err != nil {
					t.Fatal(err)
				}
				cf, created, err := openCursor(path, cursor{})
				if err != nil || created {
					t.Fatalf("reopen: created %v, err %v; want an existing two-slot file", created, err)
				}
				for _, n := range c.writes[1:] {
					if err := cf.write(cursor{Steward: id, Next: n}); err != nil {
						t.Fatal(err)
					}
					if got, err := readCursor(path); err != nil || got.Next != n || got.Steward != id {
						t.Fatalf("after writing %d: read %+v, %v", n, got, err)
					}
				}
				if err := cf.close(); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(path); err != nil || fi.Size() != 2*cursorSlot || fi.Mode().Perm() != 0o600 {
					t.Fatalf("cursor file: %v, %v; want %d bytes, mode 0600", fi, err, 2*cursorSlot)
				}
			}
			if c.after != nil {
				c.after(t, path)
			}
			got, err := readCursor(path)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("read %+v, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantID := id
			if c.before == nil && c.writes == nil {
				wantID = ""
			}
			if got.Next != c.want || got.Steward != wantID {
				t.Errorf("read %+v, want next %d of %q", got, c.want, wantID)
			}
		})
	}
}

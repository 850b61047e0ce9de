package steward

import (
	"path/filepath"
	"testing"

	"meshd/wire"
)

// TestLogDurableHead: after each seal the durable head is that seal's
// count and id, after concurrent seals it is the log's head, and a
// reopened log starts from its last record.
func TestLogDurableHead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "receipts")
	k := testKey(t)
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1})
	if n, id := l.DurableHead(); n != 0 || id != (wire.ContentID{}) {
		t.Fatalf("empty log: durable head %d %s", n, id)
	}
	for i := range 4 {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		if n, id := l.DurableHead(); n != uint64(i+1) || id != s.ID {
			t.Fatalf("after seal %d (%s): durable head %d %s", i, s.ID, n, id)
		}
	}
	done := make(chan error)
	for i := range 8 {
		go func() { _, err := st.Seal(bg, draft(10+i)); done <- err }()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if n, id := l.DurableHead(); n != 12 || n != l.Durable() || id != l.Head() {
		t.Fatalf("after concurrent seals: durable head %d %s, durable %d head %s", n, id, l.Durable(), l.Head())
	}
	_, last := l.DurableHead()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, opt := range []LogOptions{{}, {CheckpointEvery: -1}} {
		_, l, rep := openTestLog(t, dir, k, opt)
		if n, id := l.DurableHead(); n != 12 || id != last || id != rep.Head {
			t.Fatalf("reopened (%+v): durable head %d %s, want 12 %s", opt, n, id, last)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

package steward

import (
	"bytes"
	"path/filepath"
	"sync"
	"testing"
)

// Range returns exactly the sealed envelopes, across segment boundaries,
// from the index built while appending and, after a reopen, from scans.
func TestLogRangeReadsWhatWasSealed(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: 40, SegmentBytes: 8 << 10})
	const n = 300
	var envs [][]byte
	for i := range n {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, s.Envelope)
	}
	check := func(l *Log, what string) {
		t.Helper()
		if got := l.Durable(); got != n {
			t.Fatalf("%s: Durable() = %d, want %d", what, got, n)
		}
		for _, c := range []struct {
			from  uint64
			limit int
		}{{0, 1}, {0, n}, {63, 3}, {64, 1}, {65, 130}, {n - 1, 10}, {n, 5}, {n + 7, 5}, {10, 0}, {0, 2 * n}} {
			got, err := l.Range(bg, c.from, c.limit)
			if err != nil {
				t.Fatalf("%s: Range(%d, %d): %v", what, c.from, c.limit, err)
			}
			want := max(0, min(c.limit, n-int(c.from)))
			if len(got) != want {
				t.Fatalf("%s: Range(%d, %d) = %d envelopes, want %d", what, c.from, c.limit, len(got), want)
			}
			for i, e := range got {
				if !bytes.Equal(e, envs[int(c.from)+i]) {
					t.Fatalf("%s: Range(%d, %d)[%d] is not envelope %d", what, c.from, c.limit, i, int(c.from)+i)
				}
			}
		}
	}
	check(l, "while open")
	segs, _ := listSegments(dir)
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, l2, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: 40, SegmentBytes: 8 << 10})
	defer l2.Close()
	check(l2, "after reopen")
}

// A reader running beside concurrent sealers sees only durable records,
// each exactly as sealed, never a torn frame.
func TestLogRangeBesideAppends(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{SegmentBytes: 16 << 10})
	defer l.Close()
	const sealers, each = 4, 50
	var mu sync.Mutex
	sealed := map[uint64][]byte{}
	var wg sync.WaitGroup
	for g := range sealers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				s, err := st.Seal(bg, draft(g*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				sealed[s.Receipt.Sequence] = s.Envelope
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		d := l.Durable()
		got, err := l.Range(bg, 0, int(d)+10)
		if err != nil {
			t.Fatal(err)
		}
		if uint64(len(got)) < d {
			t.Fatalf("Range returned %d envelopes with %d durable", len(got), d)
		}
		for i, e := range got {
			if _, err := OpenEnvelope(e, k.Public()); err != nil {
				t.Fatalf("envelope %d of a concurrent read does not open: %v", i, err)
			}
		}
	}
	got, err := l.Range(bg, 0, sealers*each)
	if err != nil || len(got) != sealers*each {
		t.Fatalf("final read: %d envelopes, %v", len(got), err)
	}
	for i, e := range got {
		if !bytes.Equal(e, sealed[uint64(i)]) {
			t.Fatalf("envelope %d differs from what was sealed", i)
		}
	}
}

package steward

import (
	"bytes"
	"fmt"
	"os"
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

// The newest records are answered from memory, without the segment files
// (here removed from under the open log, so a read from them fails), as
// the sealer produced them even if it changes its bytes afterwards; older
// ones, and a record too large to keep, are read from the segments.
func TestLogRangeNewestFromMemory(t *testing.T) {
	k := testKey(t)
	dir := filepath.Join(t.TempDir(), "r")
	st, l, _ := openTestLog(t, dir, k, LogOptions{CheckpointEvery: -1, SegmentBytes: 64 << 10})
	defer l.Close()
	const n = recentKeep + 40
	var envs [][]byte
	for i := range n {
		s, err := st.Seal(bg, draft(i))
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, bytes.Clone(s.Envelope))
		s.Envelope[len(s.Envelope)-1] ^= 0xff // the sealer's own copy
	}
	// From the segments, while they are there: every record.
	for _, from := range []uint64{0, 39, 40, n - 1} {
		got, err := l.Range(bg, from, n)
		if err != nil || len(got) != n-int(from) {
			t.Fatalf("Range(%d): %d envelopes, %v", from, len(got), err)
		}
		for i, e := range got {
			if !bytes.Equal(e, envs[int(from)+i]) {
				t.Fatalf("Range(%d)[%d] is not envelope %d as sealed", from, i, int(from)+i)
			}
		}
	}
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if err := os.Remove(s.path); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		from   uint64
		limit  int
		memory bool // all of it among the newest recentKeep
	}{
		{n - recentKeep, recentKeep, true},
		{n - 1, 10, true},
		{n - 5, 3, true},
		{n - recentKeep - 1, 2, false},
		{0, 1, false},
	} {
		got, err := l.Range(bg, c.from, c.limit)
		if !c.memory {
			if err == nil {
				t.Fatalf("Range(%d, %d) answered with its segments gone: it should need them", c.from, c.limit)
			}
			continue
		}
		want := min(c.limit, n-int(c.from))
		if err != nil || len(got) != want {
			t.Fatalf("Range(%d, %d) from memory: %d envelopes, %v; want %d", c.from, c.limit, len(got), err, want)
		}
		for i, e := range got {
			if !bytes.Equal(e, envs[int(c.from)+i]) {
				t.Fatalf("Range(%d, %d)[%d] from memory is not envelope %d as sealed", c.from, c.limit, i, int(c.from)+i)
			}
		}
		// A reader appending to what it got does not reach the next.
		if len(got) > 1 {
			_ = append(got[0], 0xAA)
			if !bytes.Equal(got[1], envs[int(c.from)+1]) {
				t.Fatalf("Range(%d, %d): appending to one envelope changed the next", c.from, c.limit)
			}
		}
	}
}

// The ring of newest records: what it holds after wrapping, skipping,
// an oversized record and a heal's cut, and what it refuses to answer.
func TestRecentRing(t *testing.T) {
	body := func(seq uint64) []byte { return fmt.Appendf(nil, "record %d", seq) }
	big := bytes.Repeat([]byte{7}, recentMaxBody+1)
	cases := []struct {
		name string
		keep []uint64 // kept in this order (bodies from body, 1000 is big)
		cut  uint64   // 0: none
		ok   [][2]uint64
		miss [][2]uint64
	}{
		{"empty", nil, 0, nil, [][2]uint64{{0, 1}}},
		{"from zero", []uint64{0, 1, 2}, 0, [][2]uint64{{0, 3}, {1, 2}, {2, 3}}, [][2]uint64{{0, 4}, {3, 4}, {1, 1}}},
		{"after an open", []uint64{50, 51}, 0, [][2]uint64{{50, 52}}, [][2]uint64{{49, 51}, {0, 1}}},
		{"a gap starts over", []uint64{5, 6, 9, 10}, 0, [][2]uint64{{9, 11}}, [][2]uint64{{5, 7}, {6, 10}}},
		{"wrapped", seqs(0, recentKeep+10), 0, [][2]uint64{{10, recentKeep + 10}, {recentKeep, recentKeep + 1}}, [][2]uint64{{9, 11}, {0, 1}}},
		{"oversized", []uint64{0, 1, 1000, 3}, 0, [][2]uint64{{0, 2}, {3, 4}}, [][2]uint64{{0, 3}, {2, 4}}},
		{"cut", []uint64{0, 1, 2, 3, 4}, 2, [][2]uint64{{0, 2}}, [][2]uint64{{0, 3}, {2, 3}}},
		{"cut and appended again", []uint64{0, 1, 2, 3, 4}, 2, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r recent
			for i, seq := range tc.keep {
				if seq == 1000 {
					r.keep(uint64(i), big)
					continue
				}
				r.keep(seq, body(seq))
			}
			if tc.cut != 0 {
				r.cut(tc.cut)
			}
			if tc.name == "cut and appended again" {
				r.keep(2, []byte("another 2"))
				got, ok := r.get(0, 3)
				if !ok || string(got[2]) != "another 2" || string(got[1]) != "record 1" {
					t.Fatalf("get(0, 3) after the cut and a new record 2: %q, %v", got, ok)
				}
				if _, ok := r.get(0, 4); ok {
					t.Fatal("get(0, 4) answered a record the cut dropped")
				}
				return
			}
			for _, q := range tc.ok {
				got, ok := r.get(q[0], q[1])
				if !ok || uint64(len(got)) != q[1]-q[0] {
					t.Fatalf("get(%d, %d): %d records, %v", q[0], q[1], len(got), ok)
				}
				for i, b := range got {
					if !bytes.Equal(b, body(q[0]+uint64(i))) {
						t.Fatalf("get(%d, %d)[%d] = %q", q[0], q[1], i, b)
					}
				}
			}
			for _, q := range tc.miss {
				if got, ok := r.get(q[0], q[1]); ok {
					t.Fatalf("get(%d, %d) answered %q: it does not hold them all", q[0], q[1], got)
				}
			}
		})
	}
}

func seqs(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

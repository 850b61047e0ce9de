package steward

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"meshd/wire"
)

func pinDoc(hash, why, prev string) CorpusPinDoc {
	return CorpusPinDoc{Corpus: "acme/docs", CorpusHash: hash, Why: why, Prev: prev, Embedded: 12, Reused: 3,
		Repos: []PinRepo{{ID: "site", Branch: "main", Commit: strings.Repeat("a", 40)}, {ID: "api", Commit: strings.Repeat("b", 40)}}}
}

func pinDraft(hash, why, prev string, prevSeq *uint64) Draft {
	return CorpusPinDraft(pinDoc(hash, why, prev), "rag/v1:corpus="+hash+":embed=gguf:e5", prevSeq)
}

// A corpus-pin document round-trips, is bound to its record, and refuses
// what does not agree with itself or with the record.
func TestCorpusPinDoc(t *testing.T) {
	d := pinDoc("h1", PinSync, strings.Repeat("c", 64))
	got, err := DecodeCorpusPinDoc(d.Encode())
	if err != nil || got.Corpus != d.Corpus || len(got.Repos) != 2 || got.Repos[1] != d.Repos[1] || got.Prev != d.Prev || got.Why != PinSync {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, c := range []struct {
		name string
		mut  func(*CorpusPinDoc)
		msg  string
	}{
		{"unknown why", func(d *CorpusPinDoc) { d.Why = "whim" }, `why "whim"`},
		{"no repos", func(d *CorpusPinDoc) { d.Repos = nil }, "at least one repo"},
		{"prev not an id", func(d *CorpusPinDoc) { d.Prev = "xyz" }, "prev must be a content id"},
		{"no commit", func(d *CorpusPinDoc) { d.Repos[0].Commit = "" }, "names no id or no commit"},
		{"corpus not org/name", func(d *CorpusPinDoc) { d.Corpus = "docs" }, "is not org/name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := pinDoc("h1", PinStart, "")
			c.mut(&d)
			if _, err := DecodeCorpusPinDoc(d.Encode()); !errors.Is(err, ErrDocument) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%v, want %q", err, c.msg)
			}
		})
	}
	// Lists of unequal length cannot come from Encode: build one by hand.
	bad := encodeDoc([]docField{txt("mesh_record", RecordCorpusPin), txt("corpus", "acme/docs"), txt("corpus_hash", "h"),
		texts("repo_ids", []string{"a", "b"}), texts("repo_branches", []string{""}), texts("repo_commits", []string{"c", "d"}),
		num("embedded_chunks", 0), num("reused_files", 0), txt("why", PinStart)})
	if _, err := DecodeCorpusPinDoc(bad); err == nil || !strings.Contains(err.Error(), "hold 2, 1 and 2 entries") {
		t.Fatalf("unequal lists: %v", err)
	}

	rs := chainOf(t, pinDraft("h1", PinStart, "", nil))
	if err := CheckRecordDocument(rs[0], pinDoc("h1", PinStart, "").Encode()); err != nil {
		t.Fatal(err)
	}
	other := pinDoc("h1", PinStart, "")
	other.Corpus = "acme/other"
	if err := CheckRecordDocument(rs[0], other.Encode()); err == nil {
		t.Fatal("another corpus's document was taken for this record")
	}
}

// The receipt rules of a corpus-pin record, as sealing judges them.
func TestCorpusPinRecordRules(t *testing.T) {
	st := New(testKey(t), nil, Options{})
	for _, c := range []struct {
		name string
		mut  func(*Draft)
		want Reason
	}{
		{"honest", func(*Draft) {}, ""},
		{"with tokens", func(d *Draft) { d.Outcome.TokensOut = 1 }, RefusedRecord},
		{"in a run", func(d *Draft) { d.Run = u64(0) }, RefusedRecord},
		{"not a corpus backend", func(d *Draft) { d.Backend = "meshd" }, RefusedRecord},
		{"not a corpus recipe", func(d *Draft) { d.Recipe = "run" }, RefusedRecord},
		{"prev not earlier", func(d *Draft) { d.PinPrev = u64(5) }, RefusedRecord},
		{"energy", func(d *Draft) { d.Energy = wire.Estimated(1) }, RefusedRecord},
		{"x_pin_prev on a serve", func(d *Draft) { *d = hwDraft(5); d.PinPrev = u64(1) }, RefusedRecord},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := pinDraft("h1", PinStart, "", nil)
			c.mut(&d)
			prev := wire.ContentOf([]byte("the receipt before"))
			_, err := st.Build(d, 5, &prev, make([]byte, NonceSize), testClock())
			if c.want == "" && err != nil || c.want != "" && ReasonOf(err) != c.want {
				t.Fatalf("%v, want [%s]", err, c.want)
			}
		})
	}
}

// The chain rule: per corpus, each pin names the last before it.
func TestPinLinks(t *testing.T) {
	id := strings.Repeat("d", 64)
	other := func(hash string, prev *uint64) Draft {
		d := pinDoc(hash, PinStart, "")
		d.Corpus = "acme/other"
		if prev != nil {
			d.Prev = id
		}
		return CorpusPinDraft(d, "rag/v1:corpus="+hash+":embed=e", prev)
	}
	for _, c := range []struct {
		name string
		ds   []Draft
		from uint64
		msg  string
	}{
		{"a line", []Draft{pinDraft("h1", PinStart, "", nil), hwDraft(1), pinDraft("h2", PinSync, id, u64(0))}, 0, ""},
		{"two corpora interleaved", []Draft{pinDraft("h1", PinStart, "", nil), other("o1", nil), pinDraft("h2", PinSync, id, u64(0)), other("o2", u64(1))}, 0, ""},
		{"a second first pin", []Draft{pinDraft("h1", PinStart, "", nil), pinDraft("h2", PinStart, "", nil)}, 0, "names no predecessor, but pin record 0"},
		{"a fork", []Draft{pinDraft("h1", PinStart, "", nil), pinDraft("h2", PinSync, id, u64(0)), pinDraft("h3", PinSync, id, u64(0))}, 0, "the corpus's last pin is 1 (a fork)"},
		{"names another corpus's pin", []Draft{other("o1", nil), pinDraft("h2", PinSync, id, u64(0))}, 0, "is not a pin record of that corpus"},
		{"names a serve", []Draft{hwDraft(0), pinDraft("h2", PinSync, id, u64(0))}, 0, "is not a pin record of that corpus"},
		{"predecessor before the walk", []Draft{pinDraft("h1", PinStart, "", nil), hwDraft(1), pinDraft("h2", PinSync, id, u64(0))}, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := chainOf(t, c.ds...)
			var l PinLinks
			var err error
			for s := c.from; s < uint64(len(c.ds)) && err == nil; s++ {
				err = l.Add(rs[s])
			}
			if c.msg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ReasonOf(err) != RefusedRecord || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("%v, want [record] naming %q", err, c.msg)
			}
		})
	}
}

// The log's walk refuses a forked pin chain: a pin record signed by the
// steward's key but naming a stale predecessor damages the log at that
// record, for VerifyLog and OpenLog alike; the honest line verifies.
func TestLogVerifiesPinLinks(t *testing.T) {
	k := testKey(t)
	for _, c := range []struct {
		name string
		prev uint64 // the third pin's x_pin_prev
		want bool   // refused
	}{
		{"honest", 1, false},
		{"forked", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "r")
			st, l, _ := openTestLog(t, dir, k, LogOptions{NoSync: true})
			first, err := st.Seal(bg, pinDraft("h1", PinStart, "", nil))
			if err != nil {
				t.Fatal(err)
			}
			second, err := st.Seal(bg, pinDraft("h2", PinReload, first.ID.String(), u64(0)))
			if err != nil {
				t.Fatal(err)
			}
			prevID := second.ID.String()
			if c.want {
				prevID = first.ID.String()
			}
			if _, err := st.Seal(bg, pinDraft("h3", PinSync, prevID, u64(c.prev))); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			_, verr := VerifyLog(bg, dir, VerifyOptions{Trusted: k.Public()})
			l2, _, oerr := OpenLog(bg, dir, LogOptions{Key: k, Full: true})
			if oerr == nil {
				l2.Close()
			}
			if !c.want {
				if verr != nil || oerr != nil {
					t.Fatalf("verify %v, open %v", verr, oerr)
				}
				return
			}
			for stage, err := range map[string]error{"verify": verr, "open": oerr} {
				var de *DamageError
				if !errors.As(err, &de) || de.Sequence != 2 || ReasonOf(err) != RefusedRecord || !strings.Contains(err.Error(), "a fork") {
					t.Fatalf("%s: %v, want damage at sequence 2 [record] naming a fork", stage, err)
				}
			}
		})
	}
}

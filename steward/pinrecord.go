package steward

import (
	"fmt"
	"strings"

	"meshd/wire"
)

// A corpus-pin record (PROFILE §22) seals the moment a node began to serve
// a corpus at a pin: which commits of which repos, under which corpus
// hash, and why (start, reload, sync). Its receipt names the corpus by its
// backend (rag:<org>/<name>, the backend its answers are served on), the
// corpus hash by its recipe (the answers' recipe, so an answer is tied to
// the pin it was served at), and the corpus's previous pin record by
// x_pin_prev, so that a walk of the chain alone sees each corpus's pins as
// one line: each names its predecessor, and no two name the same one.

// RecordCorpusPin is x_record of a corpus-pin record.
const RecordCorpusPin = "corpus-pin"

// The reasons a pin moves, a corpus-pin document's "why".
const (
	PinStart  = "start"
	PinReload = "reload"
	PinSync   = "sync"
)

// CorpusPinBackend is the backend a corpus's answers and pin records
// name: "rag:<org>/<name>".
func CorpusPinBackend(corpus string) string { return "rag:" + corpus }

// corpusRecipePrefix is what every corpus recipe starts with.
const corpusRecipePrefix = "rag/v1:corpus="

// PinRepo is one repository of a pin.
type PinRepo struct {
	ID     string
	Branch string // "" when the pin names a commit only
	Commit string
}

// CorpusPinDoc is a corpus-pin record's document.
type CorpusPinDoc struct {
	Corpus     string // org/name
	CorpusHash string
	Repos      []PinRepo
	// Embedded counts the chunks embedded for this pin, Reused the files
	// whose chunks and vectors were kept from the pin before.
	Embedded uint64
	Reused   uint64
	Why      string // PinStart, PinReload or PinSync
	// Prev is the content id (64 hex) of the envelope of the corpus's
	// previous corpus-pin record; "" on the first.
	Prev string
}

// Encode is the document's deterministic CBOR. The repos are three
// arrays of text of one length, in the corpus's repo order.
func (d CorpusPinDoc) Encode() []byte {
	ids, branches, commits := make([]string, len(d.Repos)), make([]string, len(d.Repos)), make([]string, len(d.Repos))
	for i, r := range d.Repos {
		ids[i], branches[i], commits[i] = r.ID, r.Branch, r.Commit
	}
	f := []docField{txt("mesh_record", RecordCorpusPin), txt("corpus", d.Corpus), txt("corpus_hash", d.CorpusHash),
		texts("repo_ids", ids), texts("repo_branches", branches), texts("repo_commits", commits),
		num("embedded_chunks", d.Embedded), num("reused_files", d.Reused), txt("why", d.Why)}
	if d.Prev != "" {
		f = append(f, txt("prev", d.Prev))
	}
	return encodeDoc(f)
}

// textList marks a docField holding an array of text strings.
const textList byte = 0xff

func texts(k string, v []string) docField { return docField{key: k, kind: textList, texts: v} }

func (r *docReader) texts(k string) []string {
	v, ok := r.m[k]
	if !ok {
		if r.err == nil {
			r.err = docErr("%s is missing", k)
		}
		return nil
	}
	switch xs := v.(type) {
	case []string:
		return xs
	case []uint64:
		if len(xs) == 0 {
			return nil
		}
	}
	if r.err == nil {
		r.err = docErr("%s must be an array of text strings", k)
	}
	return nil
}

// DecodeCorpusPinDoc decodes a corpus-pin record's document strictly and
// checks that it agrees with itself: one entry per repo in each list, at
// least one repo, a known why, a prev that is a content id.
func DecodeCorpusPinDoc(b []byte) (CorpusPinDoc, error) {
	d, err := decodeAs(b, RecordCorpusPin, func(r *docReader) CorpusPinDoc {
		d := CorpusPinDoc{Corpus: r.text("corpus", true), CorpusHash: r.text("corpus_hash", true),
			Embedded: r.need("embedded_chunks"), Reused: r.need("reused_files"), Why: r.text("why", true), Prev: r.text("prev", false)}
		ids, branches, commits := r.texts("repo_ids"), r.texts("repo_branches"), r.texts("repo_commits")
		if r.err == nil && (len(ids) != len(branches) || len(ids) != len(commits)) {
			r.err = docErr("repo_ids, repo_branches and repo_commits hold %d, %d and %d entries", len(ids), len(branches), len(commits))
		}
		if r.err == nil {
			for i := range ids {
				d.Repos = append(d.Repos, PinRepo{ID: ids[i], Branch: branches[i], Commit: commits[i]})
			}
		}
		return d
	})
	if err != nil {
		return d, err
	}
	switch {
	case len(d.Repos) == 0:
		return d, docErr("a corpus pin names at least one repo")
	case d.Corpus == "" || !strings.Contains(d.Corpus, "/"):
		return d, docErr("corpus %q is not org/name", d.Corpus)
	case d.CorpusHash == "":
		return d, docErr("corpus_hash is empty")
	case d.Why != PinStart && d.Why != PinReload && d.Why != PinSync:
		return d, docErr("why %q is none of %s, %s, %s", d.Why, PinStart, PinReload, PinSync)
	case d.Prev != "" && !wire.IsLowerHex(d.Prev, 32):
		return d, docErr("prev must be a content id: 64 lower-case hex digits")
	}
	for i, rp := range d.Repos {
		if rp.ID == "" || rp.Commit == "" {
			return d, docErr("repo %d names no id or no commit", i)
		}
	}
	return d, nil
}

// matches checks that d is the document of corpus-pin record r: the
// backend is the corpus's, the recipe names its hash, and a prev is named
// exactly when x_pin_prev is.
func (d CorpusPinDoc) matches(r *Receipt) error {
	if want := CorpusPinBackend(d.Corpus); r.Backend != want {
		return docErr("corpus-pin document names corpus %q, the record's backend is %q, not %q", d.Corpus, r.Backend, want)
	}
	if !strings.HasPrefix(r.Recipe, corpusRecipePrefix+d.CorpusHash+":") {
		return docErr("corpus-pin document names corpus hash %s, the record's recipe is %q", d.CorpusHash, r.Recipe)
	}
	if (d.Prev != "") != (r.PinPrev != nil) {
		return docErr("the document's prev and x_pin_prev of record %d are not both present or both absent", r.Sequence)
	}
	return nil
}

// checkCorpusPin holds a corpus-pin receipt to what it shows alone (the
// common record rules and the no-energy rules of run records already
// held): it is in no run, names a corpus backend and a corpus recipe, and
// x_pin_prev names an earlier receipt.
func (r *Receipt) checkCorpusPin() error {
	switch {
	case r.Run != nil:
		return recordErr("a corpus-pin record belongs to no run: it carries no x_run")
	case !strings.HasPrefix(r.Backend, "rag:") || len(r.Backend) == len("rag:"):
		return recordErr("a corpus-pin record's backend is rag:<org>/<name>, not %q", r.Backend)
	case !strings.HasPrefix(r.Recipe, corpusRecipePrefix):
		return recordErr("a corpus-pin record's recipe is the corpus's (%s<hash>:…), not %q", corpusRecipePrefix, r.Recipe)
	case r.PinPrev != nil && *r.PinPrev >= r.Sequence:
		return recordErr("x_pin_prev %d must name an earlier receipt than sequence %d", *r.PinPrev, r.Sequence)
	}
	return nil
}

// CorpusPinDraft is the draft of a corpus-pin record: Estimator, no
// energy, no window, backend rag:<org>/<name>, recipe the corpus's answer
// recipe, x_pin_prev the corpus's previous pin record (nil on its first).
func CorpusPinDraft(doc CorpusPinDoc, recipe string, prev *uint64) Draft {
	d := RecordDraft(RecordCorpusPin, doc.Encode(), nil, CorpusPinBackend(doc.Corpus), recipe, PinRoute(doc), wire.Estimated(0),
		wire.Metering{Meter: EstimatorMeter, Kind: wire.KindEstimator})
	if prev != nil {
		p := *prev
		d.PinPrev = &p
	}
	return d
}

// PinRoute is the route line of a corpus-pin record.
func PinRoute(d CorpusPinDoc) string {
	h := d.CorpusHash
	if len(h) > 16 {
		h = h[:16]
	}
	return fmt.Sprintf("corpus pin %s: %s (%s), %d repos", d.Corpus, h, d.Why, len(d.Repos))
}

// PinLinks checks, receipt by receipt in chain order, that the
// corpus-pin records of each corpus (by backend) form one line: each
// names in x_pin_prev the corpus's last pin record before it, the first
// names none. A predecessor before the first receipt given (a walk from a
// checkpoint, a segment) cannot be seen and is not judged. The zero value
// is ready to use.
type PinLinks struct {
	started bool
	first   uint64
	last    map[string]uint64
}

// Add judges r, if it is a corpus-pin record, then remembers it. A pin
// naming another predecessor than its corpus's last pin (a fork), or none
// when there is one, is refused with the reason record.
func (l *PinLinks) Add(r *Receipt) error {
	if !l.started {
		l.started, l.first = true, r.Sequence
	}
	if r.Record == nil || *r.Record != RecordCorpusPin {
		return nil
	}
	last, seen := l.last[r.Backend]
	switch {
	case r.PinPrev == nil && seen:
		return recordErr("corpus-pin record %d of %s names no predecessor, but pin record %d of that corpus precedes it (a fork)", r.Sequence, r.Backend, last)
	case r.PinPrev != nil && seen && *r.PinPrev != last:
		return recordErr("corpus-pin record %d of %s names pin %d as its predecessor, but the corpus's last pin is %d (a fork)", r.Sequence, r.Backend, *r.PinPrev, last)
	case r.PinPrev != nil && !seen && *r.PinPrev >= l.first:
		return recordErr("corpus-pin record %d of %s names %d as its predecessor, which is not a pin record of that corpus", r.Sequence, r.Backend, *r.PinPrev)
	}
	if l.last == nil {
		l.last = map[string]uint64{}
	}
	l.last[r.Backend] = r.Sequence
	return nil
}

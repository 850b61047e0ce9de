package corpus

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"meshd/steward"
	"meshd/wire"
)

// Each pin a corpus begins to be served at is sealed in the steward's
// receipt chain as a corpus-pin record (PROFILE §22) naming the corpus's
// previous pin record. The node keeps, beside the corpus state, a small
// index of the last pin record sealed (<org>__<name>.pin) so that finding
// the predecessor does not read the whole chain; the chain, not the
// index, is what is verified.

// Pins seals corpus pins into a steward's chain.
type Pins struct {
	Steward *steward.Steward
	// Log is the steward's log: the index's record is confirmed there, and
	// the chain is searched when the index is missing, stale or was left
	// mid-seal.
	Log *steward.Log
}

// pinIndex is the index file: the envelope of the corpus's last pin
// record, and the document of a pin being sealed (written before the
// seal, cleared after), so a crash between the two is resolved from the
// chain at the next seal.
type pinIndex struct {
	Sealed  []byte `cbor:"sealed,omitempty"`
	Pending []byte `cbor:"pending,omitempty"`
}

// lastPin is what a new pin needs of the corpus's last one.
type lastPin struct {
	seq    uint64
	id     wire.ContentID
	recipe string
	env    []byte
}

// Seal seals doc (its Prev is filled in here) as the corpus's new pin,
// unless the corpus's last pin record has this recipe already (the same
// corpus hash and embedding: a restart at the same pin). index is the
// index file's path. It returns the sealed record, or nil when nothing
// was sealed.
func (p Pins) Seal(ctx context.Context, index string, doc steward.CorpusPinDoc, recipe string) (*steward.Sealed, error) {
	last, err := p.last(ctx, index, steward.CorpusPinBackend(doc.Corpus))
	if err != nil {
		return nil, err
	}
	var prev *uint64
	idx := pinIndex{}
	if last != nil {
		if last.recipe == recipe {
			if err := writeIndex(index, pinIndex{Sealed: last.env}); err != nil {
				return nil, err
			}
			return nil, nil
		}
		doc.Prev, prev = last.id.String(), &last.seq
		idx.Sealed = last.env
	}
	d := steward.CorpusPinDraft(doc, recipe, prev)
	idx.Pending = doc.Encode()
	if err := writeIndex(index, idx); err != nil {
		return nil, err
	}
	s, err := p.Steward.Seal(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("corpus pin: %w", err)
	}
	if err := writeIndex(index, pinIndex{Sealed: s.Envelope}); err != nil {
		return s, err
	}
	return s, nil
}

// last finds the corpus's last pin record: the index's, confirmed in the
// log, when no pin was left mid-seal; else the chain is searched (from the
// index's record on, or from the start when the index is missing or names
// a record the log does not hold).
func (p Pins) last(ctx context.Context, index, backend string) (*lastPin, error) {
	key := p.Steward.Public()
	idx, err := readIndex(index)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var last *lastPin
	from := uint64(0)
	if idx.Sealed != nil {
		if lp, err := openPin(idx.Sealed, key, backend); err == nil {
			got, err := p.Log.Range(ctx, lp.seq, 1)
			if err != nil {
				return nil, fmt.Errorf("pin index %s: %w", index, err)
			}
			if len(got) == 1 && bytes.Equal(got[0], idx.Sealed) {
				last, from = lp, lp.seq+1
			}
		}
	}
	if last != nil && idx.Pending == nil {
		return last, nil
	}
	found, err := p.scan(ctx, from, backend)
	if err != nil {
		return nil, err
	}
	if found != nil {
		last = found
	}
	return last, nil
}

// scanBatch is how many envelopes a search of the chain reads at once.
const scanBatch = 512

// scan returns the last corpus-pin record of backend at or after from.
func (p Pins) scan(ctx context.Context, from uint64, backend string) (*lastPin, error) {
	key := p.Steward.Public()
	kind := wire.AppendText(nil, steward.RecordCorpusPin)
	var last *lastPin
	for {
		envs, err := p.Log.Range(ctx, from, scanBatch)
		if err != nil {
			return nil, fmt.Errorf("corpus pin: searching the receipt log: %w", err)
		}
		for _, env := range envs {
			// Only records of this kind can be pins: skip the rest unopened.
			if !bytes.Contains(env, kind) {
				continue
			}
			if lp, err := openPin(env, key, backend); err == nil {
				last = lp
			}
		}
		if len(envs) < scanBatch {
			return last, nil
		}
		from += uint64(len(envs))
	}
}

// openPin opens env as a corpus-pin record of backend under key.
func openPin(env []byte, key ed25519.PublicKey, backend string) (*lastPin, error) {
	o, err := steward.OpenEnvelope(env, key)
	if err != nil {
		return nil, err
	}
	r := o.Receipt
	if r.Record == nil || *r.Record != steward.RecordCorpusPin || r.Backend != backend {
		return nil, fmt.Errorf("receipt %d is not a corpus-pin record of %s", r.Sequence, backend)
	}
	return &lastPin{seq: r.Sequence, id: o.ID, recipe: r.Recipe, env: bytes.Clone(env)}, nil
}

func readIndex(path string) (pinIndex, error) {
	var idx pinIndex
	b, err := os.ReadFile(path)
	if err != nil {
		return idx, err
	}
	if err := wire.DecMode().Unmarshal(b, &idx); err != nil {
		// An unreadable index is no index: the chain is searched.
		return pinIndex{}, nil
	}
	return idx, nil
}

// writeIndex replaces the index atomically and durably.
func writeIndex(path string, idx pinIndex) error {
	b, err := wire.EncMode().Marshal(&idx)
	if err != nil {
		return fmt.Errorf("pin index: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pin index: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("pin index %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pin index %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pin index %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pin index %s: %w", path, err)
	}
	return nil
}

// PinDoc is the corpus-pin document of corpus c served as org/name, why
// it began to be served, and what its ingestion embedded and reused.
func PinDoc(org, name string, c *Corpus, st Stats, why string) steward.CorpusPinDoc {
	d := steward.CorpusPinDoc{Corpus: org + "/" + name, CorpusHash: c.Hash(), Embedded: uint64(st.Embedded), Reused: uint64(st.Reused), Why: why}
	for _, r := range c.Repos {
		d.Repos = append(d.Repos, steward.PinRepo{ID: r.ID, Branch: r.Branch, Commit: r.Commit})
	}
	return d
}

// Recipe is the recipe of the provider's answers and of the pin records
// of the corpus it serves now.
func (p *Provider) Recipe() string { return answerBackend{p}.Recipe() }

// RecipeFor is the answer recipe of corpus c under embedding recipe emb.
func RecipeFor(c *Corpus, emb string) string { return "rag/v1:corpus=" + c.Hash() + ":embed=" + emb }

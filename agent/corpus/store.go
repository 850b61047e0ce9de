package corpus

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/fxamacker/cbor/v2"

	"meshd/rag"
)

// storeVersion is the on-disk layout; another version is re-ingested, not
// misread.
const storeVersion = 1

type storedRepo struct {
	ID, URL, Branch, Commit, Path string
}

type storedChunk struct {
	ID, Content string
	Prov        rag.Provenance
}

type stored struct {
	Version int
	Model   string
	Dim     int
	Repos   []storedRepo
	Files   []File
	Chunks  []storedChunk
	Vectors []byte // little-endian float32, Dim per chunk
}

// Save writes the corpus to path atomically (a temporary file renamed
// over it), so a crash leaves the old corpus or the new one.
func (c *Corpus) Save(path string) error {
	s := stored{Version: storeVersion, Model: c.Model, Dim: c.Dim, Files: c.Files}
	for _, r := range c.Repos {
		s.Repos = append(s.Repos, storedRepo{r.ID, r.URL, r.Branch, r.Commit, r.Path})
	}
	for _, ch := range c.Chunks {
		s.Chunks = append(s.Chunks, storedChunk{ch.ID, ch.Content, ch.Provenance})
	}
	s.Vectors = make([]byte, 4*len(c.vectors))
	for i, v := range c.vectors {
		binary.LittleEndian.PutUint32(s.Vectors[4*i:], math.Float32bits(v))
	}
	data, err := cbor.Marshal(s)
	if err != nil {
		return fmt.Errorf("corpus: encode: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".corpus-*")
	if err != nil {
		return fmt.Errorf("corpus: save: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("corpus: save: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("corpus: save: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("corpus: save: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// Load reads a corpus saved by Save; a missing file is (nil, nil), and a
// file of another layout or a damaged one is an error the caller answers
// by ingesting afresh.
func Load(path string) (*Corpus, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("corpus: load: %w", err)
	}
	var s stored
	if err := cbor.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("corpus: load %s: %w", path, err)
	}
	if s.Version != storeVersion {
		return nil, fmt.Errorf("corpus: load %s: layout version %d, want %d", path, s.Version, storeVersion)
	}
	if s.Dim <= 0 || len(s.Vectors) != 4*s.Dim*len(s.Chunks) {
		return nil, fmt.Errorf("corpus: load %s: %d vector bytes for %d chunks of dim %d", path, len(s.Vectors), len(s.Chunks), s.Dim)
	}
	c := &Corpus{Model: s.Model, Dim: s.Dim, Files: s.Files}
	for _, r := range s.Repos {
		c.Repos = append(c.Repos, Repo{Repo: rag.Repo{ID: r.ID, URL: r.URL, Branch: r.Branch, Commit: r.Commit}, Path: r.Path})
	}
	for _, ch := range s.Chunks {
		c.Chunks = append(c.Chunks, Chunk{ID: ch.ID, Content: ch.Content, Provenance: ch.Prov})
	}
	for _, f := range c.Files {
		for _, ci := range f.Chunks {
			if ci < 0 || ci >= len(c.Chunks) {
				return nil, fmt.Errorf("corpus: load %s: file %s names chunk %d of %d", path, f.SourcePath, ci, len(c.Chunks))
			}
		}
	}
	c.vectors = make([]float32, len(s.Vectors)/4)
	for i := range c.vectors {
		c.vectors[i] = math.Float32frombits(binary.LittleEndian.Uint32(s.Vectors[4*i:]))
	}
	c.index()
	return c, nil
}

// Package corpus is meshd's side of the RAG service contract: a corpus of
// git repositories pinned at commits, read locally (never fetched while
// serving), chunked by lines with provenance on every chunk, embedded
// through an embedding engine, and searched exactly by cosine similarity to
// answer the contract's five procedures. The contract's own types and
// checks are package rag's; this package owns ingestion and the index.
package corpus

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"meshd/rag"
)

// Embedder turns texts into unit vectors of one model.
type Embedder interface {
	// Embed returns one L2-normalised vector per text and the tokens the
	// model read.
	Embed(ctx context.Context, texts []string) ([][]float32, int, error)
	// Dim is the vectors' length.
	Dim() int
}

// Config describes a corpus.
type Config struct {
	// Model names the embedding in the corpus identity, e.g.
	// "macula/multilingual-e5-small:f16": the same repos embedded by
	// another model are another corpus.
	Model string
	// Repos are the repositories in list order (the hash keeps it). URL is
	// what describe_corpus shows; Path is where the repository is on this
	// machine (a work tree or a bare repository).
	Repos []Repo
	// ChunkLines is the lines per chunk (default 40) and Overlap the lines
	// a chunk shares with the one before (default 8).
	ChunkLines, Overlap int
	// MaxFileBytes skips larger files (default 1 MiB): a corpus is text.
	MaxFileBytes int64
	// MaxChunkBytes ends a chunk early (default 1500 bytes) so that a
	// passage stays within the embedding model's context.
	MaxChunkBytes int
	// PassagePrefix and QueryPrefix are the model's role prefixes (e5:
	// "passage: " and "query: "), applied to what is embedded, never to
	// what is stored or returned.
	PassagePrefix, QueryPrefix string
}

// Repo is a repository pinned at a commit.
type Repo struct {
	rag.Repo
	// Path is the local repository the commit is read from.
	Path string
}

func (c *Config) defaults() {
	if c.ChunkLines <= 0 {
		c.ChunkLines = 40
	}
	if c.Overlap < 0 || c.Overlap >= c.ChunkLines {
		c.Overlap = 0
	} else if c.Overlap == 0 {
		c.Overlap = min(8, c.ChunkLines/4)
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 1 << 20
	}
	if c.MaxChunkBytes <= 0 {
		c.MaxChunkBytes = 1500
	}
}

// Chunk is one stored passage with its provenance.
type Chunk struct {
	ID         string
	Content    string
	Provenance rag.Provenance
}

// File is one ingested source: where it came from and the blob it was.
type File struct {
	// SourcePath is "<repo_id>/<path in repo>".
	SourcePath string
	RepoID     string
	Path       string
	// Commit is the commit the file was ingested at: an unchanged file
	// keeps it across pin moves, since its bytes are those of that commit.
	Commit string
	// Blob is the git blob id of the content, which says whether it
	// changed.
	Blob string
	// SHA256 is the hex SHA-256 of the file's bytes.
	SHA256 string
	// Chunks index the corpus's chunks.
	Chunks []int
}

// Corpus is an ingested corpus: its identity, files, chunks and vectors.
type Corpus struct {
	Model  string
	Dim    int
	Repos  []Repo
	Files  []File
	Chunks []Chunk
	// vectors holds Dim float32s per chunk, unit length.
	vectors []float32
	bySrc   map[string]int
	byID    map[string]int
}

// Hash is the corpus hash of the contract.
func (c *Corpus) Hash() string {
	repos := make([]rag.Repo, len(c.Repos))
	for i, r := range c.Repos {
		repos[i] = r.Repo
	}
	return rag.CorpusHash(c.Model, c.Dim, repos)
}

// Stats counts what an ingest did.
type Stats struct {
	Files, Reused, Embedded, Chunks, Skipped int
	EmbedTokens                              int
}

// Ingest reads every repository at its pinned commit and builds the
// corpus. Files whose blob is the one prev ingested (same repo and path)
// keep prev's chunks, vectors and ingested-at commit; everything else is
// chunked and embedded. prev may be nil.
func Ingest(ctx context.Context, cfg Config, emb Embedder, prev *Corpus) (*Corpus, Stats, error) {
	cfg.defaults()
	var st Stats
	// The corpus keeps its own repos: a caller's later edit of cfg must
	// not move the pin of a corpus being served.
	c := &Corpus{Model: cfg.Model, Dim: emb.Dim(), Repos: slices.Clone(cfg.Repos)}
	if prev != nil && (prev.Model != cfg.Model || prev.Dim != c.Dim) {
		prev = nil // another embedding: nothing can be reused
	}
	seen := map[string]bool{}
	for _, r := range cfg.Repos {
		if seen[r.ID] {
			return nil, st, fmt.Errorf("corpus: repo id %q listed twice", r.ID)
		}
		seen[r.ID] = true
		if err := (rag.Description{Model: cfg.Model, Dim: c.Dim, Repos: []rag.Repo{r.Repo}}).Validate(); err != nil {
			return nil, st, fmt.Errorf("corpus: repo %q: %w", r.ID, err)
		}
		if err := c.ingestRepo(ctx, cfg, r, emb, prev, &st); err != nil {
			return nil, st, fmt.Errorf("corpus: repo %q at %s: %w", r.ID, r.Commit, err)
		}
	}
	c.index()
	st.Chunks = len(c.Chunks)
	return c, st, nil
}

// pending is a file read at this pin whose chunks still need vectors.
type pending struct {
	file   int
	chunks []Chunk
}

func (c *Corpus) ingestRepo(ctx context.Context, cfg Config, r Repo, emb Embedder, prev *Corpus, st *Stats) error {
	repo, err := git.PlainOpenWithOptions(r.Path, &git.PlainOpenOptions{DetectDotGit: false})
	if err != nil {
		return fmt.Errorf("open %s: %w", r.Path, err)
	}
	commit, err := repo.CommitObject(plumbing.NewHash(r.Commit))
	if err != nil {
		// Never fetched at serve time: the pin must already be local.
		return fmt.Errorf("commit not in the local repository %s: %w", r.Path, err)
	}
	tree, err := commit.Tree()
	if err != nil {
		return err
	}
	var todo []pending
	err = tree.Files().ForEach(func(f *object.File) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			return nil // links and submodules carry no text of this repo
		}
		src := r.ID + "/" + f.Name
		blob := f.Hash.String()
		if prev != nil {
			if i, ok := prev.bySrc[src]; ok && prev.Files[i].Blob == blob {
				c.reuse(prev, i)
				st.Files++
				st.Reused++
				return nil
			}
		}
		if f.Size > cfg.MaxFileBytes {
			st.Skipped++
			return nil
		}
		data, err := readBlob(f)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if !isText(data) {
			st.Skipped++
			return nil
		}
		sum := sha256.Sum256(data)
		file := File{SourcePath: src, RepoID: r.ID, Path: f.Name, Commit: r.Commit, Blob: blob, SHA256: hex.EncodeToString(sum[:])}
		chunks := chunkLines(string(data), cfg.ChunkLines, cfg.Overlap, cfg.MaxChunkBytes, r.ID, f.Name, r.Commit)
		c.Files = append(c.Files, file)
		todo = append(todo, pending{file: len(c.Files) - 1, chunks: chunks})
		st.Files++
		return nil
	})
	if err != nil {
		return err
	}
	return c.embed(ctx, cfg, emb, todo, st)
}

func readBlob(f *object.File) ([]byte, error) {
	rd, err := f.Reader()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	return io.ReadAll(rd)
}

// isText keeps UTF-8 files without NUL bytes: what a person reads.
func isText(b []byte) bool {
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// reuse copies file i of prev, its chunks and their vectors.
func (c *Corpus) reuse(prev *Corpus, i int) {
	f := prev.Files[i]
	idx := make([]int, len(f.Chunks))
	for k, ci := range f.Chunks {
		idx[k] = len(c.Chunks)
		c.Chunks = append(c.Chunks, prev.Chunks[ci])
		c.vectors = append(c.vectors, prev.vectors[ci*prev.Dim:(ci+1)*prev.Dim]...)
	}
	f.Chunks = idx
	c.Files = append(c.Files, f)
}

// embedBatch bounds one call to the embedding engine.
const embedBatch = 32

func (c *Corpus) embed(ctx context.Context, cfg Config, emb Embedder, todo []pending, st *Stats) error {
	var texts []string
	var owners [][2]int // (todo index, chunk index)
	flush := func() error {
		if len(texts) == 0 {
			return nil
		}
		vecs, tokens, err := emb.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("embedding %d chunks: %w", len(texts), err)
		}
		if len(vecs) != len(texts) {
			return fmt.Errorf("embedding returned %d vectors for %d chunks", len(vecs), len(texts))
		}
		st.EmbedTokens += tokens
		for k, v := range vecs {
			if len(v) != c.Dim {
				return fmt.Errorf("embedding returned a vector of %d values, the corpus has dim %d", len(v), c.Dim)
			}
			o := owners[k]
			p := &todo[o[0]]
			ci := len(c.Chunks)
			c.Chunks = append(c.Chunks, p.chunks[o[1]])
			c.vectors = append(c.vectors, normalise(v)...)
			c.Files[p.file].Chunks = append(c.Files[p.file].Chunks, ci)
			st.Embedded++
		}
		texts, owners = texts[:0], owners[:0]
		return nil
	}
	for ti := range todo {
		for k, ch := range todo[ti].chunks {
			texts = append(texts, cfg.PassagePrefix+ch.Content)
			owners = append(owners, [2]int{ti, k})
			if len(texts) == embedBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// chunkLines cuts text into chunks of at most n lines (and, unless a
// single line is longer, at most maxBytes bytes, so a passage fits the
// embedding model's context), each sharing up to overlap lines with the
// one before, each with its provenance. A chunk's content is its lines
// exactly as in the file, newlines included.
func chunkLines(text string, n, overlap, maxBytes int, repoID, file, commit string) []Chunk {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var out []Chunk
	for start := 0; start < len(lines); {
		end, size := start, 0
		for end < len(lines) && end-start < n && (end == start || size+len(lines[end]) <= maxBytes) {
			size += len(lines[end])
			end++
		}
		content := strings.Join(lines[start:end], "")
		if strings.TrimSpace(content) != "" {
			sum := sha256.Sum256([]byte(content))
			p := rag.Provenance{Kind: rag.KindCorpus, Path: repoID + "/" + file, RepoID: repoID, Commit: commit,
				StartLine: start + 1, EndLine: end, ContentSHA256: hex.EncodeToString(sum[:])}
			out = append(out, Chunk{ID: chunkID(p), Content: content, Provenance: p})
		}
		if end == len(lines) {
			break
		}
		start = max(start+1, end-overlap)
	}
	return out
}

// chunkID names a chunk by what it is: its place and its text. The same
// lines of the same file content have the same id at every pin.
func chunkID(p rag.Provenance) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%s", p.Path, p.StartLine, p.EndLine, p.ContentSHA256)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// index builds the lookups.
func (c *Corpus) index() {
	c.bySrc = make(map[string]int, len(c.Files))
	for i, f := range c.Files {
		c.bySrc[f.SourcePath] = i
	}
	c.byID = make(map[string]int, len(c.Chunks))
	for i, ch := range c.Chunks {
		c.byID[ch.ID] = i
	}
}

// Sources lists the files in source-path order, from offset, at most
// limit.
func (c *Corpus) Sources(offset, limit int) []File {
	files := make([]File, len(c.Files))
	copy(files, c.Files)
	sort.Slice(files, func(i, j int) bool { return files[i].SourcePath < files[j].SourcePath })
	if offset >= len(files) {
		return nil
	}
	return files[offset:min(len(files), offset+limit)]
}

// Chunk returns the chunk with id.
func (c *Corpus) Chunk(id string) (Chunk, bool) {
	i, ok := c.byID[id]
	if !ok {
		return Chunk{}, false
	}
	return c.Chunks[i], true
}

// ErrNotFound is wrapped when a chunk or source is not in the corpus.
var ErrNotFound = errors.New("not found")

// Document returns a source's bytes exactly as at the commit it was
// ingested at, read again from the local repository.
func (c *Corpus) Document(sourcePath string) ([]byte, File, error) {
	i, ok := c.bySrc[sourcePath]
	if !ok {
		return nil, File{}, fmt.Errorf("source %q: %w", sourcePath, ErrNotFound)
	}
	f := c.Files[i]
	var local string
	for _, r := range c.Repos {
		if r.ID == f.RepoID {
			local = r.Path
		}
	}
	repo, err := git.PlainOpen(local)
	if err != nil {
		return nil, f, err
	}
	blob, err := repo.BlobObject(plumbing.NewHash(f.Blob))
	if err != nil {
		return nil, f, fmt.Errorf("source %q: blob %s: %w", sourcePath, f.Blob, err)
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, f, err
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, f, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, f, fmt.Errorf("source %q: the repository's blob no longer hashes to what was ingested", sourcePath)
	}
	return data, f, nil
}

// Provenance of a whole source: the file at its ingested commit.
func (f File) Provenance() rag.Provenance {
	return rag.Provenance{Kind: rag.KindCorpus, Path: f.SourcePath, RepoID: f.RepoID, Commit: f.Commit, ContentSHA256: f.SHA256}
}

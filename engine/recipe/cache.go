package recipe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"lukechampine.com/blake3"

	"meshd/wire"
)

// fileKey identifies one version of a file. Size and modification time are
// what a rewrite changes; the inode and change time (where the platform has
// them) also catch a rewrite that restores the old size and mtime, since
// ctime cannot be set from user space.
type fileKey struct {
	path  string
	size  int64
	mtime time.Time
	ino   uint64
	ctime time.Time
}

func keyOf(path string, fi os.FileInfo) fileKey {
	k := fileKey{path: path, size: fi.Size(), mtime: fi.ModTime()}
	k.ino, k.ctime = inodeAndCtime(fi)
	return k
}

func (k fileKey) sameVersion(o fileKey) bool {
	return k.path == o.path && k.size == o.size && k.mtime.Equal(o.mtime) &&
		k.ino == o.ino && k.ctime.Equal(o.ctime)
}

type cacheEntry struct {
	key  fileKey
	done chan struct{} // closed when id/err are set
	id   wire.ContentID
	err  error
}

// Cache remembers the content id of each file by (resolved absolute path,
// size, modification time), so a model is hashed once per version rather
// than once per start. It is safe for concurrent use; concurrent requests
// for the same file version share one hash computation.
type Cache struct {
	mu       sync.Mutex
	entries  map[string]*cacheEntry
	computed uint64
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{entries: make(map[string]*cacheEntry)} }

// Computations reports how many files have been hashed in full, which is
// what the cache exists to minimise.
func (c *Cache) Computations() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.computed
}

// ErrChangedWhileHashing is wrapped when a file is modified while its
// content id is being computed: the id would name no version of the file.
var ErrChangedWhileHashing = errors.New("file changed while it was being hashed")

// ContentID returns the BLAKE3-256 content id of the file at path,
// computing it only when the file is new to the cache or has changed.
func (c *Cache) ContentID(ctx context.Context, path string) (wire.ContentID, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return wire.ContentID{}, fmt.Errorf("content id of %s: %w", path, err)
	}
	// Symlinks are resolved so that retargeting a link is seen as a change
	// of file, not hidden behind an unchanged link path.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return wire.ContentID{}, fmt.Errorf("content id of %s: %w", path, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return wire.ContentID{}, fmt.Errorf("content id of %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return wire.ContentID{}, fmt.Errorf("content id of %s: not a regular file", path)
	}
	key := keyOf(real, fi)

	c.mu.Lock()
	e, ok := c.entries[real]
	if ok && e.key.sameVersion(key) {
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return wire.ContentID{}, fmt.Errorf("content id of %s: %w", path, ctx.Err())
		}
		if e.err == nil {
			return e.id, nil
		}
		// A failed computation is not cached: retry it below.
		c.mu.Lock()
		if c.entries[real] == e {
			delete(c.entries, real)
		}
		c.mu.Unlock()
		return c.ContentID(ctx, path)
	}
	e = &cacheEntry{key: key, done: make(chan struct{})}
	c.entries[real] = e
	c.computed++
	c.mu.Unlock()

	e.id, e.err = hashFile(ctx, real, key)
	if e.err != nil {
		e.err = fmt.Errorf("content id of %s: %w", path, e.err)
	}
	close(e.done)
	return e.id, e.err
}

// hashFile streams the file through BLAKE3 and checks that the version it
// read is the version it was asked for, before and after reading.
func hashFile(ctx context.Context, path string, want fileKey) (wire.ContentID, error) {
	f, err := os.Open(path)
	if err != nil {
		return wire.ContentID{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return wire.ContentID{}, err
	}
	if !keyOf(path, fi).sameVersion(want) {
		return wire.ContentID{}, ErrChangedWhileHashing
	}
	h := blake3.New(32, nil)
	n, err := io.Copy(h, ctxReader{ctx, f})
	if err != nil {
		return wire.ContentID{}, err
	}
	after, err := os.Stat(path)
	if err != nil {
		return wire.ContentID{}, err
	}
	if n != want.size || !keyOf(path, after).sameVersion(want) {
		return wire.ContentID{}, ErrChangedWhileHashing
	}
	var id wire.ContentID
	h.Sum(id[:0])
	return id, nil
}

// ctxReader lets a long hash of a large model be cancelled between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Files names the files a recipe is composed from.
type Files struct {
	Model    string
	Draft    string  // empty when no draft model is used
	KV       KVCache // the cache type the engine is told; zero for its default
	Adapters []FileAdapter
}

// FileAdapter is a LoRA adapter file and the scale it is applied at.
type FileAdapter struct {
	Path  string
	Scale float64
}

// Recipe hashes (or recalls) every file in fs and returns the recipe that
// names them.
func (c *Cache) Recipe(ctx context.Context, fs Files) (Recipe, error) {
	r := Recipe{KV: fs.KV}
	var err error
	if fs.Model == "" {
		return Recipe{}, fmt.Errorf("recipe: model path is empty")
	}
	if r.Model, err = c.ContentID(ctx, fs.Model); err != nil {
		return Recipe{}, fmt.Errorf("recipe: model: %w", err)
	}
	if fs.Draft != "" {
		if r.Draft, err = c.ContentID(ctx, fs.Draft); err != nil {
			return Recipe{}, fmt.Errorf("recipe: draft: %w", err)
		}
	}
	for i, a := range fs.Adapters {
		id, err := c.ContentID(ctx, a.Path)
		if err != nil {
			return Recipe{}, fmt.Errorf("recipe: adapter %d: %w", i, err)
		}
		r.Adapters = append(r.Adapters, Adapter{ID: id, Scale: a.Scale})
	}
	if err := r.Validate(); err != nil {
		return Recipe{}, err
	}
	return r, nil
}

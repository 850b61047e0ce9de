package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// cursor is what the cursor file holds: the next sequence to publish, for
// which steward (a log re-created under a new key starts over).
type cursor struct {
	Steward string `json:"steward"`
	Next    uint64 `json:"next"`
}

// maxCursorFile bounds what is read of a cursor file: a valid one is
// well under a hundred bytes.
const maxCursorFile = 4096

// readCursor reads the cursor file at path; a missing file is a cursor at
// zero.
func readCursor(path string) (cursor, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return cursor{}, nil
	}
	if err != nil {
		return cursor{}, fmt.Errorf("read fleet cursor: %w", err)
	}
	if len(b) > maxCursorFile {
		return cursor{}, fmt.Errorf("fleet cursor %s: %d bytes, not a cursor", path, len(b))
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil {
		return cursor{}, fmt.Errorf("fleet cursor %s: %w", path, err)
	}
	return c, nil
}

// writeCursor replaces the cursor file by a rename, so that it is never
// torn, but without fsync: a cursor lost or older after a crash only makes
// the publisher republish receipts the stream already holds, which the
// server and the verifier recognise as duplicates, while two fsyncs per
// published batch would be paid on every node's serve path.
func writeCursor(path string, c cursor) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'), 0o600, false)
}

// writeFileAtomic writes data to a temporary file beside path, makes it
// durable, renames it over path and makes the rename durable.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return writeFile(path, data, perm, true)
}

// writeFile writes data to a temporary file beside path and renames it
// over path; with durable, both the file and the rename are synced.
func writeFile(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	defer d.Close()
	if err = d.Sync(); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

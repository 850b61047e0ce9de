package framelog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrLocked is wrapped when another process or handle holds a store open.
var ErrLocked = errors.New("already open by another writer")

// RegularOrAbsent refuses a path that exists and is not a regular file: a
// FIFO or device would hang or flood the reader, and a symlink could point
// a store anywhere.
func RegularOrAbsent(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file (%s)", path, fi.Mode().Type())
	}
	return nil
}

// OpenFile opens the regular file at path for reading, or for appending if
// write is set (creating it then), refusing anything but a regular file.
func OpenFile(path string, write bool) (*os.File, error) {
	if err := RegularOrAbsent(path); err != nil {
		return nil, err
	}
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR | os.O_CREATE
	}
	// O_NONBLOCK keeps a FIFO swapped in after the check from hanging open.
	// Created private: receipts and balances are nobody else's to read.
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// OpenAppend opens (or creates) the framed file at path for appending:
// it scans the whole file with visit, cuts a torn tail (durably, before
// anything new follows it), writes the magic into an empty file, and
// returns a Writer positioned at the end.
func (fm Format) OpenAppend(ctx context.Context, path string, noSync bool, visit Visit) (*Writer, Tail, error) {
	f, err := OpenFile(path, true)
	if err != nil {
		return nil, Tail{}, err
	}
	tail, err := fm.Scan(ctx, f, visit)
	if err != nil {
		f.Close()
		return nil, Tail{}, err
	}
	w, err := fm.Resume(f, tail, noSync)
	if err != nil {
		return nil, Tail{}, err
	}
	return w, tail, nil
}

// Resume cuts f at tail.End (writing the magic if the file is empty) and
// returns a Writer appending there. f is closed on error.
func (fm Format) Resume(f *os.File, tail Tail, noSync bool) (*Writer, error) {
	end := tail.End
	if tail.Torn > 0 || end == 0 {
		if err := f.Truncate(end); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut torn tail: %w", err)
		}
		created := end == 0
		if created {
			if _, err := f.WriteAt([]byte(fm.Magic), 0); err != nil {
				f.Close()
				return nil, fmt.Errorf("write magic: %w", err)
			}
			end = int64(len(fm.Magic))
		}
		if !noSync {
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, err
			}
			if created {
				// A new file's directory entry must be durable too, or a
				// power cut can lose it with everything acknowledged in it.
				if err := SyncDir(filepath.Dir(f.Name())); err != nil {
					f.Close()
					return nil, err
				}
			}
		}
	}
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return NewWriter(f, end, noSync), nil
}

// SyncDir fsyncs a directory, making entries created or renamed in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// WriteAtomic replaces path with data: write a temporary file beside it,
// fsync, rename over path, fsync the directory. A crash leaves either the
// old content or the new, never a mixture.
func WriteAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return SyncDir(dir)
}

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

// Resume cuts a torn tail off f at tail.End (writing the magic if the file
// is empty) and returns a Writer appending there; zero padding after
// tail.End is kept for the writer to overwrite. f is closed on error; an error of the
// storage under it wraps ErrStorage.
func (fm Format) Resume(f File, tail Tail, noSync bool) (*Writer, error) {
	end := tail.End
	fail := func(what string, err error) (*Writer, error) {
		f.Close()
		return nil, fmt.Errorf("%w: %s: %w", ErrStorage, what, err)
	}
	if tail.Torn > 0 || end == 0 {
		if err := f.Truncate(end); err != nil {
			return fail("cut torn tail", err)
		}
		created := end == 0
		if created {
			if _, err := f.WriteAt([]byte(fm.Magic), 0); err != nil {
				return fail("write magic", err)
			}
			end = int64(len(fm.Magic))
		}
		if !noSync {
			if err := f.Sync(); err != nil {
				return fail("sync", err)
			}
			if created {
				// A new file's directory entry must be durable too, or a
				// power cut can lose it with everything acknowledged in it.
				if err := SyncDir(filepath.Dir(f.Name())); err != nil {
					return fail("sync directory", err)
				}
			}
		}
	}
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		return fail("seek", err)
	}
	return newWriter(f, end, end+tail.Zero, noSync), nil
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

// Probe writes n bytes to a scratch file at path, fsyncs it (unless
// noSync) and removes it: a store that the storage refused learns this way
// that writes succeed again. wrap, if set, wraps the file (tests inject
// faults with it).
func Probe(path string, n int, noSync bool, wrap func(File) File) error {
	of, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("storage probe: %w", err)
	}
	var f File = of
	if wrap != nil {
		f = wrap(of)
	}
	defer os.Remove(path)
	defer f.Close()
	if _, err := f.Write(make([]byte, n)); err != nil {
		return fmt.Errorf("storage probe: write %d bytes: %w", n, err)
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("storage probe: sync: %w", err)
		}
	}
	return nil
}

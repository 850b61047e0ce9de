package steward

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"meshd/steward/internal/framelog"
)

// DirLock is an exclusive flock held on a directory itself.
type DirLock struct{ l *framelog.Lock }

// LockDir takes the exclusive lock on the directory dir (an flock on the
// directory, not on a file in it, so that no file's deletion frees it) and
// writes the holder's pid into dir/pidName as information. A second
// LockDir of dir, from this process or another, fails with ErrLocked
// naming the holder's pid.
func LockDir(dir, pidName string) (*DirLock, error) {
	l, err := framelog.LockDir(dir, pidName)
	if err != nil {
		return nil, err
	}
	return &DirLock{l: l}, nil
}

// Release drops the lock.
func (d *DirLock) Release() error {
	if d == nil {
		return nil
	}
	return d.l.Release()
}

// MakePrivate takes group and other permissions off dir and everything
// under it, following no symbolic link.
func MakePrivate(dir string) error { return framelog.Private(dir) }

// HasLog reports whether dir holds a receipt log: a segment or a
// checkpoints file. An absent directory holds none.
func HasLog(dir string) (bool, error) {
	segs, err := listSegments(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(segs) > 0 {
		return true, nil
	}
	if _, err := os.Lstat(filepath.Join(dir, checkpointsName)); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return false, nil
}

package steward

import "meshd/steward/internal/framelog"

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

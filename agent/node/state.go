package node

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"meshd/steward"
)

// pidName is the file in the state directory holding the daemon's pid:
// information for an operator; the lock is the directory's own flock.
const pidName = "meshd.pid"

// openState prepares the state directory dir before anything in it is
// read or written: it is created (0700) if absent, refused if it is not a
// directory or if group or others may write to it (they could have
// replaced the log, the ledger or the key), and locked, an flock on the
// directory itself, so that a second daemon on the same directory is
// refused whatever files were deleted from it.
func openState(dir string) (*steward.DirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("state directory %s is not a directory (%s)", dir, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("state directory %s is mode %#o, writable by group or others, who could have replaced what is in it; refusing to start (chmod 0700 %s once it is checked)", dir, perm, dir)
	}
	lock, err := steward.LockDir(dir, pidName)
	if err != nil {
		return nil, fmt.Errorf("state directory: another meshd has it open: %w", err)
	}
	return lock, nil
}

// loadOrCreateKey reads the steward key, creating it (mode 0600) at first
// start: a new node has no identity until it makes one, and the log it
// opens next is bound to that key. A missing key beside an existing log
// is refused without creating one: that log's records are signed by the
// lost key, and a new key could never append to them.
func loadOrCreateKey(path, receipts string, log *slog.Logger) (*steward.Key, error) {
	k, err := steward.LoadKeyFile(path)
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("steward key: %w", err)
	}
	has, herr := steward.HasLog(receipts)
	if herr != nil {
		return nil, fmt.Errorf("steward key %s is missing, and the receipt log %s cannot be read: %w", path, receipts, herr)
	}
	if has {
		return nil, fmt.Errorf("steward key %s is missing, but the receipt log %s exists and was signed by it: restore the key (a new one cannot append to that log); no key was created", path, receipts)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("steward key: %w", err)
	}
	if k, err = steward.GenerateKey(rand.Reader); err != nil {
		return nil, err
	}
	if err := steward.WriteKeyFile(path, k); err != nil {
		return nil, fmt.Errorf("steward key: %w", err)
	}
	log.Info("created a new steward key", "path", path, "steward", k.ID())
	return k, nil
}

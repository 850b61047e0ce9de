package ledger

import (
	"fmt"
	"os"
	"path/filepath"

	"meshd/steward/internal/framelog"
)

// ErrStorage is wrapped when the storage under the ledger refused a write
// or an fsync (ENOSPC, EIO, a short write). The ledger refuses holds until
// it heals, which it tries on the next hold and on every Storage call.
var ErrStorage = framelog.ErrStorage

// probeBytes is what a heal's probe writes to learn that the storage takes
// writes again.
const probeBytes = 16 << 10

func (l *Ledger) wrap(f *os.File) framelog.File {
	if l.opt.files != nil {
		return l.opt.files(f)
	}
	return f
}

// Storage returns nil while the ledger takes writes; after the storage
// refused one it tries to heal and returns why it could not, wrapping
// ErrStorage.
func (l *Ledger) Storage() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	if l.failed == nil && l.w.Err() == nil {
		return nil
	}
	return l.healLocked()
}

// healLocked brings a failed ledger back, called with mu held: the writer
// cuts the file back to its last durable record and makes the cut durable
// (nothing after it was acknowledged: a hold is granted only once durable,
// and a settlement or release it dropped is rebuilt from the receipts on
// reopen, exactly as after a crash); a compaction whose rename could not be
// made durable retries the directory's fsync; and a probe file is written
// and fsynced. Memory already holds what the file then says, except for
// those rebuildable closings, which memory keeps.
func (l *Ledger) healLocked() error {
	if _, err := l.w.Recover(); err != nil {
		return fmt.Errorf("grant ledger: heal: %w", err)
	}
	if l.failed != nil {
		if !l.opt.NoSync {
			if err := framelog.SyncDir(filepath.Dir(l.path)); err != nil {
				return fmt.Errorf("grant ledger: %w: heal: %w (failed first by: %v)", ErrStorage, err, l.failed)
			}
		}
		l.failed = nil
	}
	dir, base := splitPath(l.path)
	if err := framelog.Probe(filepath.Join(dir, "."+base+".storage-probe"), probeBytes, l.opt.NoSync, l.opt.files); err != nil {
		return fmt.Errorf("grant ledger: %w: heal: %w", ErrStorage, err)
	}
	return nil
}

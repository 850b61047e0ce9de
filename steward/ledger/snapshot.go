package ledger

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// Anchor ties a snapshot to the receipt log: every receipt with a sequence
// below Count that carries a grant is already reflected in the snapshot.
type Anchor struct {
	// Count is the receipt log's next sequence when the snapshot was taken.
	Count uint64
	// Head is the content id of receipt Count−1 (zero when Count is 0), so
	// that a caller can check that the log it pairs with the ledger is the
	// one the snapshot was taken against.
	Head wire.ContentID
}

// Compact replaces the ledger file by a snapshot of it: the balances of the
// live accounts, then an end record carrying the anchor, after which new
// records are appended. The new file is written beside the old one,
// fsynced, renamed over it and the directory fsynced, so a crash leaves
// either the old file or the new one. Accounts whose grant expired more
// than Options.ExpiryGrace ago (by Options.Clock) and that have no open
// hold are left out, and leave memory.
//
// anchor (nil: Options.Anchor) is called with the ledger's mutex held, only
// when no hold is open. It must make the receipt log durable up to its next
// sequence N and return N with the content id of receipt N−1. Because
// every receipt's hold stays open until it is settled, and no hold can be
// taken while the mutex is held, every granted receipt below N is then
// settled in the ledger. It must fail if the log has failed: an append
// that reported failure may still have left a receipt whose hold the
// ledger released.
//
// Compact returns false, and does nothing, while a hold is open. It blocks
// holds for the duration (two fsyncs and the snapshot's write).
func (l *Ledger) Compact(anchor func() (Anchor, error)) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.usable(); err != nil {
		return false, err
	}
	if len(l.holds) > 0 {
		return false, nil
	}
	if anchor == nil {
		anchor = l.opt.Anchor
	}
	if err := l.compactLocked(anchor); err != nil {
		return false, err
	}
	return true, nil
}

// compactDue says whether an automatic compaction should run now. Called
// with mu held (or before Open returns).
func (l *Ledger) compactDue(noSnapshot bool) bool {
	if l.opt.Anchor == nil || l.opt.CompactEvery <= 0 || len(l.holds) > 0 || l.closed || l.failed != nil {
		return false
	}
	return noSnapshot || l.sinceSnap >= l.opt.CompactEvery
}

// compactLocked writes the snapshot and switches to it. Called with mu
// held. It writes an open-hold record for every open hold, although
// Compact only calls it when there are none: the anchor is only sound
// then.
func (l *Ledger) compactLocked(anchor func() (Anchor, error)) (err error) {
	defer func() {
		l.compactErr = err
		if err == nil {
			l.compactions++
		}
	}()
	if anchor == nil {
		return errors.New("grant ledger: compact: no anchor function")
	}
	if err := l.usable(); err != nil {
		return err
	}
	a, err := anchor()
	if err != nil {
		return fmt.Errorf("grant ledger: compact: anchor: %w", err)
	}
	now := time.Now
	if l.opt.Clock != nil {
		now = l.opt.Clock
	}
	grace := l.opt.ExpiryGrace
	switch {
	case grace == 0:
		grace = DefaultExpiryGrace
	case grace < 0:
		grace = 0
	}
	cutoff := now().Add(-grace).UnixMilli()
	keep := make([]*account, 0, len(l.accounts))
	var drop []wire.ContentID
	for g, acc := range l.accounts {
		if acc.expires != 0 && acc.expires < cutoff && acc.open == 0 {
			drop = append(drop, g)
			continue
		}
		keep = append(keep, acc)
	}
	slices.SortFunc(keep, func(x, y *account) int { return compareID(x.grant, y.grant) })
	open := make([]uint64, 0, len(l.holds))
	for id, h := range l.holds {
		if h.state == holdOpen {
			open = append(open, id)
		}
	}
	slices.Sort(open)

	dir, base := splitPath(l.path)
	tmp, err := os.CreateTemp(dir, tempPrefix(base)+"*")
	if err != nil {
		return fmt.Errorf("grant ledger: compact: %w", err)
	}
	renamed := false
	defer func() {
		if !renamed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// The new file takes the lock before its rename makes it the ledger:
	// the inode the path names is never unlocked while this Ledger is open.
	lock, err := framelog.LockOpen(tmp, l.path, l.path+".lock")
	if err != nil {
		return fmt.Errorf("grant ledger: compact: %w", err)
	}
	bw := bufio.NewWriterSize(tmp, 1<<16)
	size := int64(len(format.Magic))
	bw.WriteString(format.Magic)
	var frame []byte
	put := func(body []byte) {
		frame = framelog.AppendFrame(frame[:0], body)
		bw.Write(frame)
		size += int64(len(frame))
	}
	body := make([]byte, maxBody)
	for _, acc := range keep {
		b := body[:sizeSnapAcct]
		b[0] = recSnapAcct
		copy(b[1:], acc.grant[:])
		binary.BigEndian.PutUint64(b[33:], acc.budget)
		binary.BigEndian.PutUint64(b[41:], acc.spent)
		binary.BigEndian.PutUint64(b[49:], uint64(acc.expires))
		put(b)
	}
	for _, id := range open {
		h := l.holds[id]
		put(holdLike(recSnapHold, id, h.acc.grant, h.amount))
	}
	end := body[:sizeSnapEnd]
	end[0] = recSnapEnd
	binary.BigEndian.PutUint64(end[1:], l.nextHold)
	binary.BigEndian.PutUint64(end[9:], a.Count)
	copy(end[17:], a.Head[:])
	put(end)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("grant ledger: compact: write snapshot: %w", err)
	}
	if !l.opt.NoSync {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("grant ledger: compact: sync snapshot: %w", err)
		}
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return fmt.Errorf("grant ledger: compact: %w", err)
	}
	renamed = true
	// From here the path names the new file: switch to it whatever
	// happens. The old writer's unwritten settlements go to the old,
	// unlinked file; the snapshot already has them.
	old := l.w
	l.w, l.lock = framelog.NewWriter(l.wrap(tmp), size, l.opt.NoSync), lock
	old.Close()
	l.oldSyncs += old.Syncs()
	for _, g := range drop {
		delete(l.accounts, g)
	}
	l.sinceSnap = 0
	l.anchor = &a
	if !l.opt.NoSync {
		if err := framelog.SyncDir(dir); err != nil {
			// Which file a crash would leave is unknown; take no holds on
			// either until reopened.
			l.failed = fmt.Errorf("grant ledger: %w: compact: sync directory: %w", ErrStorage, err)
			return l.failed
		}
	}
	return nil
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// ReadAnchor returns the anchor of the snapshot the ledger at path starts
// with, and false if the file is absent or has no snapshot. It reads the
// snapshot's records and nothing after them, checking their checksums but
// not replaying them, and takes no lock: the file is only ever replaced
// whole, by rename, so a concurrent writer cannot show it half a snapshot.
// An anchor read while another Ledger has the file open may be older than
// the one Open then finds; that is safe, because anchors only advance, and
// charges gathered from an older anchor are a superset of those needed.
//
// The receipt log can therefore be opened visiting only from a checkpoint
// at or below Anchor.Count, gathering the charges Open needs.
func ReadAnchor(path string) (Anchor, bool, error) {
	f, err := framelog.OpenFile(path, false)
	if errors.Is(err, fs.ErrNotExist) {
		return Anchor{}, false, nil
	}
	if err != nil {
		return Anchor{}, false, fmt.Errorf("read grant ledger anchor: %w", err)
	}
	defer f.Close()
	var head [len(oldMagic)]byte
	if n, _ := f.ReadAt(head[:], 0); n == len(head) && string(head[:]) == oldMagic {
		return Anchor{}, false, fmt.Errorf("read grant ledger anchor %s: %w", path, ErrOldFormat)
	}
	var a Anchor
	found, inSnapshot := false, false
	_, err = format.Scan(context.Background(), f, func(index uint64, off int64, b []byte) error {
		if len(b) != recordSize(b[0]) {
			return fmt.Errorf("%w: record %d at byte offset %d: bad record", ErrDamaged, index, off)
		}
		switch b[0] {
		case recSnapAcct, recSnapHold:
			inSnapshot = true
			return nil
		case recSnapEnd:
			a.Count = binary.BigEndian.Uint64(b[9:])
			a.Head = wire.ContentID(b[17:49])
			found, inSnapshot = true, false
		}
		return errStop
	})
	var ce *framelog.CorruptError
	switch {
	case errors.Is(err, errStop) || err == nil:
	case errors.As(err, &ce):
		return Anchor{}, false, fmt.Errorf("read grant ledger anchor %s: %w: %w", path, ErrDamaged, ce)
	default:
		return Anchor{}, false, fmt.Errorf("read grant ledger anchor %s: %w", path, err)
	}
	if inSnapshot {
		return Anchor{}, false, fmt.Errorf("read grant ledger anchor %s: %w: the snapshot has no end record", path, ErrDamaged)
	}
	return a, found, nil
}

func compareID(a, b wire.ContentID) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

func splitPath(path string) (dir, base string) {
	return filepath.Dir(path), filepath.Base(path)
}

// tempPrefix names the snapshots being written for the ledger named base;
// Open removes any a crash left behind.
func tempPrefix(base string) string { return "." + base + ".snapshot-" }

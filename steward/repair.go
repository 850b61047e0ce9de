package steward

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"meshd/steward/internal/framelog"
)

// RepairReport says what RepairLog found and, if applied, did.
type RepairReport struct {
	Records uint64 // receipts that verify and are kept
	// Damage is the first bad record (nil if none); everything from it on
	// is moved to Quarantine.
	Damage     *DamageError
	TornBytes  int64
	Quarantine string   // the directory the removed bytes went to
	Moved      []string // what was moved there
	// CheckpointsDropped counts checkpoints beyond the kept receipts.
	CheckpointsDropped int
	// CheckpointsMissing: the segments hold receipts but the checkpoints
	// file is gone; applied, an empty one is written (the open refuses a
	// log without it).
	CheckpointsMissing bool
	Applied            bool
}

// RepairLog is for the cases a person must decide, never run on its own:
// it verifies the log at dir from genesis and, if apply is set, cuts a torn
// tail and, at the first damaged record, moves that record and everything
// after it (the rest of its segment and every later segment) into a new
// quarantine directory inside dir, dropping the checkpoints that covered
// them. Receipts moved away are lost to the chain, and a grant ledger that
// settled holds on them keeps its debits: the report says how many were cut
// so the operator can reconcile. It takes the log's lock.
func RepairLog(ctx context.Context, dir string, trusted ed25519.PublicKey, apply bool) (*RepairReport, error) {
	lock, err := framelog.LockDir(dir, lockName)
	if err != nil {
		return nil, fmt.Errorf("repair receipt log %s: %w", dir, err)
	}
	defer lock.Release()
	segs, err := listSegments(dir)
	if err != nil {
		return nil, fmt.Errorf("repair receipt log %s: %w", dir, err)
	}
	rep := &RepairReport{}
	c := newChain(trusted, 0, nil)
	scan, _, _, err := walk(ctx, segs, nil, c, false)
	var de *DamageError
	switch {
	case errors.As(err, &de):
		rep.Damage, rep.Records = de, de.Sequence
	case err != nil:
		return nil, fmt.Errorf("repair receipt log %s: %w", dir, err)
	default:
		rep.Records, rep.TornBytes = scan.Records, scan.TornBytes
	}
	_, cks, _, ckErr := readCheckpoints(ctx, dir, trusted, false)
	for _, cp := range cks {
		if cp.Count > rep.Records {
			rep.CheckpointsDropped++
		}
	}
	if ckErr != nil {
		// A damaged checkpoints file is rebuilt: checkpoints are only a
		// shortcut, the chain is the truth.
		rep.CheckpointsDropped = -1
	}
	rep.CheckpointsMissing = checkpointsMissing(dir, rep.Records) != nil
	if !apply || (rep.Damage == nil && rep.TornBytes == 0 && rep.CheckpointsDropped == 0 && !rep.CheckpointsMissing) {
		return rep, nil
	}
	rep.Quarantine = filepath.Join(dir, "quarantine-"+strconv.FormatInt(time.Now().UnixNano(), 10))
	if rep.Damage != nil && rep.Damage.Segment != checkpointsName {
		if err := os.Mkdir(rep.Quarantine, 0o700); err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		cut := false
		for _, s := range segs {
			name := filepath.Base(s.path)
			switch {
			case cut:
				if err := os.Rename(s.path, filepath.Join(rep.Quarantine, name)); err != nil {
					return nil, fmt.Errorf("repair: %w", err)
				}
				rep.Moved = append(rep.Moved, name)
			case name == rep.Damage.Segment:
				cut = true
				if err := quarantineTail(s.path, rep.Damage.Offset, filepath.Join(rep.Quarantine, name)); err != nil {
					return nil, fmt.Errorf("repair: %w", err)
				}
				rep.Moved = append(rep.Moved, fmt.Sprintf("%s from byte %d", name, rep.Damage.Offset))
			}
		}
	} else if rep.TornBytes > 0 {
		last := segs[len(segs)-1].path
		if err := os.Truncate(last, scan.Size); err != nil {
			return nil, fmt.Errorf("repair: cut torn tail: %w", err)
		}
	}
	// Rewrite the checkpoints file with those that still describe the log.
	var keep []byte
	if ckErr == nil {
		keep = []byte(checkpointMagic)
		for _, cp := range cks {
			if cp.Count <= rep.Records {
				keep = framelog.AppendFrame(keep, cp.Envelope)
			}
		}
	}
	ckPath := filepath.Join(dir, checkpointsName)
	if ckErr != nil {
		if err := os.MkdirAll(rep.Quarantine, 0o700); err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		if err := os.Rename(ckPath, filepath.Join(rep.Quarantine, checkpointsName)); err != nil {
			return nil, fmt.Errorf("repair: %w", err)
		}
		rep.Moved = append(rep.Moved, checkpointsName)
	} else if err := framelog.WriteAtomic(ckPath, keep); err != nil {
		return nil, fmt.Errorf("repair: rewrite checkpoints: %w", err)
	}
	if err := framelog.SyncDir(dir); err != nil {
		return nil, fmt.Errorf("repair: %w", err)
	}
	rep.Applied = true
	return rep, nil
}

// quarantineTail copies path from off to its end into dst, durably, then
// cuts path at off (removing it if nothing valid is left before off).
func quarantineTail(path string, off int64, dst string) error {
	src, err := framelog.OpenFile(path, false)
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(src, off, 1<<62)); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := framelog.SyncDir(filepath.Dir(dst)); err != nil {
		return err
	}
	if off <= int64(len(segmentMagic)) {
		return os.Remove(path)
	}
	if err := os.Truncate(path, off); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

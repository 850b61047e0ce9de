package steward

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// ErrPinned is wrapped when a log does not reach what its verifier pinned:
// a head it saw before, or a count. It means the log was rolled back,
// truncated, or is another log.
var ErrPinned = errors.New("receipt log does not match what was pinned")

// VerifyOptions tune VerifyLog.
type VerifyOptions struct {
	// Trusted, if set, is the only key accepted; otherwise the first
	// record's (or the anchor's) key, printed for the caller to compare.
	Trusted ed25519.PublicKey
	// Anchor, if set, is a checkpoint trusted as the starting point:
	// verification starts after its head, so segments before it may be
	// archived away.
	Anchor *SignedCheckpoint
	// ExpectHead, if set, must be the content id of some envelope of the
	// chain; ExpectCount is the least number of receipts the log must hold.
	ExpectHead  *wire.ContentID
	ExpectCount uint64
	// Workers bounds parallel signature checks (0: GOMAXPROCS).
	Workers int
	// Visit sees every verified receipt in order.
	Visit func(*Opened) error
}

// VerifyLog verifies the receipt log at path without changing it or taking
// its lock: every record from genesis (or from opt.Anchor) across all
// segments — signature, field rules, sequence and prev links — and every
// checkpoint in the log's checkpoints file against the chain it describes.
// path is a log directory, or a single segment file. A torn final write is
// reported in the ScanReport, not as an error.
func VerifyLog(ctx context.Context, path string, opt VerifyOptions) (*ScanReport, error) {
	rep, err := verifyLog(ctx, path, opt)
	if err != nil {
		return nil, fmt.Errorf("verify receipt log %s: %w", path, err)
	}
	return rep, nil
}

func verifyLog(ctx context.Context, path string, opt VerifyOptions) (*ScanReport, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	var segs []segment
	var cks []*SignedCheckpoint
	trusted := opt.Trusted
	if a := opt.Anchor; a != nil {
		if trusted != nil && !bytes.Equal(trusted, a.Key) {
			return nil, fmt.Errorf("%w: the anchor is signed by %x, not by the trusted steward %x", ErrCheckpoint, []byte(a.Key), []byte(trusted))
		}
		trusted = a.Key
	}
	switch {
	case fi.IsDir():
		if segs, err = listSegments(path); err != nil {
			return nil, err
		}
		if _, cks, _, err = readCheckpoints(ctx, path, trusted, false); err != nil {
			return nil, err
		}
	case fi.Mode().IsRegular():
		first := uint64(0)
		name := filepath.Base(path)
		if n, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64); err == nil && name == SegmentName(n) {
			first = n
		}
		segs = []segment{{first: first, path: path}}
	default:
		return nil, fmt.Errorf("%s is neither a log directory nor a segment file (%s)", path, fi.Mode().Type())
	}
	c := newChain(trusted, opt.Workers, opt.Visit)
	pc := newPins(cks, opt)
	if opt.Anchor != nil && opt.ExpectHead != nil && opt.Anchor.HeadID == *opt.ExpectHead {
		pc.found = true
	}
	// Checkpoints before the anchor describe segments that may be archived.
	for pc.i < len(cks) && opt.Anchor != nil && cks[pc.i].Count <= opt.Anchor.Count {
		pc.i++
	}
	c.at = pc.at
	rep, _, _, err := walk(ctx, segs, opt.Anchor, c, false)
	if err != nil {
		return nil, err
	}
	if err := pc.finish(rep, opt); err != nil {
		return nil, err
	}
	if fi.IsDir() && checkpointsMissing(path, rep.Records) != nil {
		rep.CheckpointsMissing = true
	}
	return rep, nil
}

// pins matches a chain, as it is scanned, against the log's signed
// checkpoints and the head a verification expects: how a live log and
// one verified with its archive are held to the same checks.
type pins struct {
	cks        []*SignedCheckpoint
	i, matched int // the next checkpoint to meet, and how many have matched
	found      bool
	expect     *wire.ContentID
}

func newPins(cks []*SignedCheckpoint, opt VerifyOptions) *pins {
	return &pins{cks: cks, found: opt.ExpectHead == nil, expect: opt.ExpectHead}
}

// at is the chain's visit of each record: the record of sequence seq,
// content id id, in segment seg at off..end.
func (p *pins) at(seq uint64, seg string, off, end int64, id wire.ContentID) error {
	if !p.found && id == *p.expect {
		p.found = true
	}
	for p.i < len(p.cks) && p.cks[p.i].Count-1 == seq {
		cp := p.cks[p.i]
		if cp.HeadID != id || SegmentName(cp.Segment) != seg || int64(cp.HeadOffset) != off || int64(cp.End) != end {
			return &DamageError{Sequence: seq, Segment: seg, Offset: off, Err: fmt.Errorf("%w %d (count %d) does not match the log: it names %s in %s at %d..%d, the log has %s at %d..%d",
				ErrCheckpoint, p.i, cp.Count, cp.HeadID, SegmentName(cp.Segment), cp.HeadOffset, cp.End, id, off, end)}
		}
		p.matched++
		p.i++
	}
	return nil
}

// finish checks, once the whole chain is scanned into rep, that no
// checkpoint is left beyond its end, the expected head was met and the
// log holds enough receipts; it fills rep's checkpoint fields.
func (p *pins) finish(rep *ScanReport, opt VerifyOptions) error {
	if p.i < len(p.cks) {
		return &DamageError{Sequence: rep.Records, Segment: checkpointsName, Err: fmt.Errorf("checkpoint %d covers %d receipts but the log holds %d: truncated or rolled back", p.i, p.cks[p.i].Count, rep.Records)}
	}
	rep.Checkpoints = p.matched
	if len(p.cks) > 0 {
		rep.Latest = p.cks[len(p.cks)-1]
	}
	if !p.found {
		return fmt.Errorf("%w: head %s is not in the chain (which ends at sequence %d, head %s)", ErrPinned, *opt.ExpectHead, rep.Records, rep.Head)
	}
	if rep.Records < opt.ExpectCount {
		return fmt.Errorf("%w: %d receipts, want at least %d", ErrPinned, rep.Records, opt.ExpectCount)
	}
	return nil
}

// ScanSegment verifies one segment read from r, whose first record has
// sequence first (0 for a log's first segment), without a directory: the
// magic, every frame, every signature and the chain within it.
func ScanSegment(ctx context.Context, r io.Reader, first uint64, trusted ed25519.PublicKey, visit func(*Opened) error) (*ScanReport, error) {
	c := newChain(trusted, 0, visit)
	c.next, c.segFirst = first, first
	t, err := segFormat.Scan(ctx, r, func(_ uint64, off int64, body []byte) error { return c.add(off, body) })
	if err == nil {
		err = c.flush()
	}
	if err != nil {
		var ce *framelog.CorruptError
		if errors.As(err, &ce) {
			if ferr := c.flush(); ferr != nil {
				return nil, ferr
			}
			return nil, &DamageError{Sequence: first + ce.Index, Offset: ce.Offset, Err: ce.Err}
		}
		return nil, err
	}
	return &ScanReport{Records: c.next, Head: c.head, Steward: c.key, Verified: c.checked, Segments: 1,
		TornBytes: t.Torn, TornAt: t.End, Size: t.End, Last: c.last}, nil
}

package steward

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// A receipt log is a directory (PROFILE.md §8):
//
//	LOCK                     the writer's pid, information only: the lock is the directory's
//	00000000000000000000.seg segments, named by the sequence of their first record
//	checkpoints              signed checkpoints, newest last
//
// Segments and the checkpoints file share the framing of package framelog.
const (
	segmentMagic    = "MESHLOG2"
	checkpointMagic = "MESHCKP1"
	segmentSuffix   = ".seg"
	lockName        = "LOCK"
	checkpointsName = "checkpoints"
	// maxEnvelope bounds a frame so a corrupted length cannot make a
	// reader allocate gigabytes.
	maxEnvelope   = 1 << 20
	maxCheckpoint = 4096

	// DefaultSegmentBytes is the size past which a log rotates into a new
	// segment.
	DefaultSegmentBytes = 64 << 20
	// DefaultCheckpointEvery is how many receipts pass between checkpoints.
	DefaultCheckpointEvery = 4096
	// DefaultPreallocate is the step in which the segment being written is
	// filled with zeros ahead of its frames (framelog.Writer.Preallocate):
	// about 1 200 receipts, so the write that grows it comes rarely.
	DefaultPreallocate = 1 << 20
)

var (
	segFormat = framelog.Format{Magic: segmentMagic, MaxBody: maxEnvelope}
	ckFormat  = framelog.Format{Magic: checkpointMagic, MaxBody: maxCheckpoint}
)

// ErrClosed is returned by Append on a closed log.
var ErrClosed = errors.New("receipt log closed")

// ErrLocked is wrapped when another writer holds the log open.
var ErrLocked = framelog.ErrLocked

// ErrForeignSteward is wrapped when a steward is asked to append to a log
// whose chain another key signed.
var ErrForeignSteward = errors.New("receipt log belongs to another steward")

// SegmentName is the file name of the segment whose first record has
// sequence first.
func SegmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentSuffix) }

// ScanReport describes a log that checked out.
type ScanReport struct {
	Records uint64         // receipts in the log: the next sequence
	Head    wire.ContentID // content id of the last envelope (zero if empty)
	Steward ed25519.PublicKey
	// Verified is how many receipts this pass verified; From the
	// checkpoint it started from (nil: genesis).
	Verified uint64
	From     *SignedCheckpoint
	// Checkpoints is how many checkpoints were matched against the chain
	// (VerifyLog only); Latest the newest valid one.
	Checkpoints int
	Latest      *SignedCheckpoint
	Segments    int
	// TornBytes is the size of an incomplete final write (0 if none), at
	// TornAt in segment TornSegment. OpenLog cuts it; VerifyLog reports it.
	TornBytes   int64
	TornAt      int64
	TornSegment string
	// Size is the byte length of the last segment's valid prefix.
	Size int64
	// Last is the last verified receipt, or nil if none was verified.
	Last *Receipt
	// Witness is what OpenLog found comparing the log with its rollback
	// witness (nil: none configured). CheckpointsMissing (VerifyLog) says
	// that the segments hold receipts but the checkpoints file is gone.
	Witness            *WitnessReport
	CheckpointsMissing bool
}

// LogOptions tune OpenLog.
type LogOptions struct {
	// Key is the steward key that appends; it signs the log's checkpoints
	// and every existing record must be signed by it. Without Key the log
	// writes no checkpoints.
	Key *Key
	// Trusted, if set (and Key is not), is the only key accepted on
	// existing records.
	Trusted ed25519.PublicKey
	// NoSync skips fsync. Only for benchmarks that isolate CPU cost.
	NoSync bool
	// Visit, if set, sees every record verified while opening.
	Visit func(*Opened) error
	// VisitFrom makes the open start from a checkpoint no later than this
	// sequence, so that Visit sees every record from there on (a ledger
	// snapshot anchored at it needs them). Nil: the newest checkpoint.
	VisitFrom *uint64
	// Full verifies from genesis, ignoring checkpoints.
	Full bool
	// SegmentBytes and CheckpointEvery: 0 means the defaults; a negative
	// CheckpointEvery writes checkpoints only on Close.
	SegmentBytes    int64
	CheckpointEvery int
	// Preallocate is the step in which the segment being written is kept
	// filled with zeros ahead of its frames, so that a receipt's fsync need
	// not grow the file: 0 means DefaultPreallocate, negative none. The
	// zeros are cut when the segment is closed or rotated.
	Preallocate int64
	// Ledger, if set, is sealed into every checkpoint as its ledger
	// summary.
	Ledger func() string
	// Workers bounds the signature checks run in parallel (0: GOMAXPROCS).
	Workers int
	// Clock stamps checkpoints; nil means time.Now.
	Clock func() time.Time
	// OnSync, if set, is told how long each fsync of a segment took.
	OnSync func(time.Duration)
	// Witness, if set (with Key), is the rollback witness every checkpoint
	// is bound to; an open that finds the log older than it is refused
	// with ErrRolledBack.
	Witness Witness

	// files, if set, wraps every file the log writes (segments, the
	// checkpoints file, the storage probe): tests inject faults with it.
	files func(framelog.File) framelog.File
}

// Log is an append-only, hash-chained, durable receipt log.
//
// An append builds (signs) its record under the log's mutex, which fixes
// the chain order, then waits for durability through the segment's
// group-commit writer: an uncontended sealer does everything on its own
// goroutine, and concurrent sealers share fsyncs.
type Log struct {
	dir      string
	lock     *framelog.Lock
	key      *Key
	noSync   bool
	onSync   func(time.Duration)
	segBytes int64
	prealloc int64
	ckEvery  uint64
	ledger   func() string
	clock    func() time.Time
	files    func(framelog.File) framelog.File

	mu     sync.Mutex
	closed bool
	// err is why the storage last refused a write (nil: healthy). While it
	// is set appends are refused, each first trying to heal (heal.go);
	// down mirrors it for a lock-free check.
	err  error
	down atomic.Bool
	// pend are the records appended to the current segment that were not
	// yet known durable, base the head before the first of them: what a
	// heal rolls back to.
	pend     []headState
	base     headState
	steward  ed25519.PublicKey
	w        *framelog.Writer
	seg      uint64 // first sequence of the segment being written
	headSeg  uint64 // first sequence of the segment holding the head
	next     uint64
	head     wire.ContentID
	headOff  int64
	headEnd  int64
	headEp   uint64 // the writer epoch headEnd belongs to
	oldSyncs uint64

	acked atomic.Uint64 // records durable and acknowledged: see Durable
	index readIndex

	durHead durableHead // the newest durable record: see DurableHead

	ckMu    sync.Mutex
	ck      *framelog.Writer
	ckCount uint64
	latest  *SignedCheckpoint
	witness Witness
}

// OpenLog opens or creates the receipt log directory dir and takes its
// lock, an flock on the directory itself: a second opener, in this process
// or another, is refused with ErrLocked naming the holder's pid, whatever
// files in dir were deleted meanwhile. The directory and its files are
// made private (0700/0600). The log is verified from its newest valid checkpoint (or from
// genesis); a torn final write is cut and reported, while any other damage
// refuses to open with a *DamageError and changes nothing.
func OpenLog(ctx context.Context, dir string, opt LogOptions) (*Log, *ScanReport, error) {
	l, rep, err := openLog(ctx, dir, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("open receipt log %s: %w", dir, err)
	}
	return l, rep, nil
}

func openLog(ctx context.Context, dir string, opt LogOptions) (*Log, *ScanReport, error) {
	if err := ensureDir(dir); err != nil {
		return nil, nil, err
	}
	lock, err := lockLog(dir)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{dir: dir, lock: lock, key: opt.Key, noSync: opt.NoSync, onSync: opt.OnSync, segBytes: opt.SegmentBytes,
		ledger: opt.Ledger, clock: opt.Clock, witness: opt.Witness, files: opt.files}
	if l.segBytes <= 0 {
		l.segBytes = DefaultSegmentBytes
	}
	switch {
	case opt.Preallocate == 0:
		l.prealloc = DefaultPreallocate
	case opt.Preallocate > 0:
		l.prealloc = opt.Preallocate
	}
	switch {
	case opt.CheckpointEvery == 0:
		l.ckEvery = DefaultCheckpointEvery
	case opt.CheckpointEvery > 0:
		l.ckEvery = uint64(opt.CheckpointEvery)
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	trusted := opt.Trusted
	if opt.Key != nil {
		trusted = opt.Key.Public()
	}
	ok := false
	defer func() {
		if !ok {
			l.release()
		}
	}()

	segs, err := listSegments(dir)
	if err != nil {
		return nil, nil, err
	}
	ckf, cks, ckTail, err := readCheckpoints(ctx, dir, trusted, true)
	if err != nil {
		return nil, nil, err
	}
	if ckf != nil {
		defer func() {
			if !ok {
				ckf.Close()
			}
		}()
	}
	if len(cks) > 0 {
		trusted = cks[0].Key
		l.latest = cks[len(cks)-1]
		l.ckCount = l.latest.Count
	}
	var from *SignedCheckpoint
	if !opt.Full {
		for i := len(cks) - 1; i >= 0; i-- {
			if opt.VisitFrom == nil || cks[i].Count <= *opt.VisitFrom {
				from = cks[i]
				break
			}
		}
	}
	c := newChain(trusted, opt.Workers, opt.Visit)
	rep, lastFile, tail, err := walk(ctx, segs, from, c, true)
	if err != nil {
		return nil, nil, err
	}
	if l.latest != nil && l.latest.Count > rep.Records {
		return nil, nil, &DamageError{Sequence: rep.Records, Err: fmt.Errorf("the newest checkpoint covers %d receipts but the log holds %d: truncated or rolled back", l.latest.Count, rep.Records)}
	}
	if err := checkpointsMissing(dir, rep.Records); err != nil {
		return nil, nil, err
	}
	if l.witness != nil && l.key != nil {
		if rep.Witness, err = checkWitness(ctx, l.witness, l.latest, rep.Records); err != nil {
			return nil, nil, err
		}
	}
	// Everything checked out: only now is anything changed.
	if lastFile == nil {
		f, err := framelog.OpenFile(filepath.Join(dir, SegmentName(0)), true)
		if err != nil {
			return nil, nil, err
		}
		lastFile, tail, rep.Segments = f, framelog.Tail{}, 1
	}
	if tail.Torn > 0 {
		rep.TornBytes, rep.TornAt = tail.Torn, tail.End
	}
	l.w, err = segFormat.Resume(l.wrap(lastFile), tail, opt.NoSync)
	if err != nil {
		return nil, nil, err
	}
	l.w.Preallocate(l.prealloc, l.segBytes)
	if opt.OnSync != nil {
		l.w.ObserveSyncs(opt.OnSync)
	}
	if ckf == nil {
		ckf, err = framelog.OpenFile(filepath.Join(dir, checkpointsName), true)
		if err != nil {
			l.w.Close()
			return nil, nil, err
		}
	}
	// Only the segment being written preallocates: zeros after the
	// checkpoints are cut.
	if l.ck, err = ckFormat.Resume(l.wrap(ckf), ckTail.Cut(), opt.NoSync); err != nil {
		l.w.Close()
		return nil, nil, err
	}
	l.steward = c.key
	l.next, l.head = rep.Records, rep.Head
	l.acked.Store(rep.Records)
	l.durHead.note(rep.Records, rep.Head)
	l.seg = c.segFirst
	l.headSeg, l.headOff, l.headEnd = c.lastSeg, c.lastOff, c.lastEnd
	if from != nil && c.checked == 0 {
		l.headSeg, l.headOff, l.headEnd = from.Segment, int64(from.HeadOffset), int64(from.End)
	}
	l.base = l.headLocked()
	if l.key != nil && l.steward != nil && !bytes.Equal(l.steward, l.key.Public()) {
		l.w.Close()
		l.ck.Close()
		return nil, nil, fmt.Errorf("%w: its records are signed by %x, not by this steward's key %s", ErrForeignSteward, []byte(l.steward), l.key.ID())
	}
	rep.Latest = l.latest
	ok = true
	return l, rep, nil
}

// walk verifies the segments segs of dir, starting from checkpoint from
// (or genesis), through c. With forWrite the last segment's file is kept
// open (read-write) and returned with its tail, for appending.
func walk(ctx context.Context, segs []segment, from *SignedCheckpoint, c *chain, forWrite bool) (*ScanReport, *os.File, framelog.Tail, error) {
	rep := &ScanReport{From: from}
	start := 0
	if from != nil {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].first >= from.Segment })
		if i == len(segs) || segs[i].first != from.Segment {
			return nil, nil, framelog.Tail{}, &DamageError{Sequence: from.Count - 1, Segment: SegmentName(from.Segment),
				Err: fmt.Errorf("%w: names segment %s, which is missing", ErrCheckpoint, SegmentName(from.Segment))}
		}
		start = i
		if err := checkHead(segs[i].path, from, c.key); err != nil {
			return nil, nil, framelog.Tail{}, err
		}
		c.key = from.Key
		c.next, c.head = from.Count, from.HeadID
	} else if len(segs) > 0 && segs[0].first != 0 {
		return nil, nil, framelog.Tail{}, &DamageError{Sequence: 0, Segment: filepath.Base(segs[0].path),
			Err: fmt.Errorf("the first segment starts at sequence %d and no checkpoint anchors it (archived segments need a checkpoint)", segs[0].first)}
	}
	var lastFile *os.File
	var tail framelog.Tail
	for i := start; i < len(segs); i++ {
		first := segs[i].first
		name := filepath.Base(segs[i].path)
		c.seg, c.segFirst = name, first
		if c.next != first && (from == nil || i != start) {
			return nil, nil, framelog.Tail{}, &DamageError{Sequence: c.next, Segment: name,
				Err: fmt.Errorf("segment starts at sequence %d, but the chain continues at %d", first, c.next)}
		}
		f, err := framelog.OpenFile(segs[i].path, forWrite && i == len(segs)-1)
		if err != nil {
			return nil, nil, framelog.Tail{}, err
		}
		visit := func(_ uint64, off int64, body []byte) error { return c.add(off, body) }
		var t framelog.Tail
		if from != nil && i == start {
			if _, err = f.Seek(int64(from.End), io.SeekStart); err == nil {
				t, err = segFormat.ScanFrom(ctx, f, int64(from.End), from.Count-first, visit)
			}
		} else {
			t, err = segFormat.Scan(ctx, f, visit)
		}
		if err == nil {
			err = c.flush()
		}
		if err != nil {
			f.Close()
			var ce *framelog.CorruptError
			if errors.As(err, &ce) {
				if ferr := c.flush(); ferr != nil {
					return nil, nil, framelog.Tail{}, ferr // an earlier bad record comes first
				}
				return nil, nil, framelog.Tail{}, &DamageError{Sequence: first + ce.Index, Segment: name, Offset: ce.Offset, Err: ce.Err}
			}
			return nil, nil, framelog.Tail{}, err
		}
		rep.Segments++
		rep.Size = t.End
		if i < len(segs)-1 {
			f.Close()
			if err := notLastTail(t); err != nil {
				return nil, nil, framelog.Tail{}, &DamageError{Sequence: c.next, Segment: name, Offset: t.End, Err: err}
			}
			continue
		}
		if t.Torn > 0 {
			rep.TornBytes, rep.TornAt, rep.TornSegment = t.Torn, t.End, name
		}
		if forWrite {
			lastFile, tail = f, t
		} else {
			f.Close()
		}
	}
	rep.Records, rep.Head, rep.Steward = c.next, c.head, c.key
	rep.Verified, rep.Last = c.checked, c.last
	return rep, lastFile, tail, nil
}

// notLastTail refuses anything after the last frame of a segment that is
// not the last: a rotation cuts the old segment's padding, durably, before
// the next segment exists.
func notLastTail(t framelog.Tail) error {
	switch {
	case t.Torn > 0:
		return fmt.Errorf("%d bytes of a torn write in a segment that is not the last", t.Torn)
	case t.Zero > 0:
		return fmt.Errorf("%d bytes of zeros after the last frame of a segment that is not the last", t.Zero)
	}
	return nil
}

// checkHead proves that checkpoint cp describes this log: the frame at its
// head offset is the envelope it names, at the sequence it names.
func checkHead(path string, cp *SignedCheckpoint, trusted ed25519.PublicKey) error {
	name := filepath.Base(path)
	bad := func(err error) error {
		return &DamageError{Sequence: cp.Count - 1, Segment: name, Offset: int64(cp.HeadOffset), Err: fmt.Errorf("%w does not match the log: %v", ErrCheckpoint, err)}
	}
	if trusted != nil && !bytes.Equal(trusted, cp.Key) {
		return bad(fmt.Errorf("signed by %x, not by the log's steward %x", []byte(cp.Key), []byte(trusted)))
	}
	f, err := framelog.OpenFile(path, false)
	if err != nil {
		return err
	}
	defer f.Close()
	var env []byte
	var end int64
	stop := errors.New("stop")
	_, err = segFormat.ScanFrom(context.Background(), io.NewSectionReader(f, int64(cp.HeadOffset), maxEnvelope+framelog.HeaderSize), int64(cp.HeadOffset), 0,
		func(_ uint64, off int64, body []byte) error {
			env, end = body, off+framelog.HeaderSize+int64(len(body))
			return stop
		})
	if err != nil && err != stop {
		return bad(err)
	}
	if env == nil {
		return bad(errors.New("no record at its head offset"))
	}
	if uint64(end) != cp.End {
		return bad(fmt.Errorf("the head frame ends at %d, not %d", end, cp.End))
	}
	if id := wire.ContentOf(env); id != cp.HeadID {
		return bad(fmt.Errorf("the record at its head offset is %s, not %s", id, cp.HeadID))
	}
	o, err := OpenEnvelope(env, cp.Key)
	if err != nil {
		return bad(err)
	}
	if o.Receipt.Sequence != cp.Count-1 {
		return bad(fmt.Errorf("its head record carries sequence %d, want %d", o.Receipt.Sequence, cp.Count-1))
	}
	return nil
}

// readCheckpoints reads the checkpoints file of dir, verifying each. With
// forWrite the file (created if absent) is returned open, with its tail.
func readCheckpoints(ctx context.Context, dir string, trusted ed25519.PublicKey, forWrite bool) (*os.File, []*SignedCheckpoint, framelog.Tail, error) {
	path := filepath.Join(dir, checkpointsName)
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, framelog.Tail{}, nil
	}
	f, err := framelog.OpenFile(path, forWrite)
	if err != nil {
		return nil, nil, framelog.Tail{}, err
	}
	var cks []*SignedCheckpoint
	tail, err := ckFormat.Scan(ctx, f, func(i uint64, off int64, body []byte) error {
		cp, err := OpenCheckpoint(body, trusted)
		if err != nil {
			return fmt.Errorf("checkpoints file, record %d at byte offset %d: %w", i, off, err)
		}
		if trusted == nil {
			trusted = cp.Key
		}
		if n := len(cks); n > 0 && cp.Count <= cks[n-1].Count {
			return fmt.Errorf("checkpoints file, record %d at byte offset %d: %w: count %d does not follow %d", i, off, ErrCheckpoint, cp.Count, cks[n-1].Count)
		}
		cks = append(cks, cp)
		return nil
	})
	if err != nil {
		f.Close()
		return nil, nil, framelog.Tail{}, &DamageError{Segment: checkpointsName, Err: err}
	}
	if !forWrite {
		f.Close()
		f = nil
	}
	return f, cks, tail, nil
}

// segment is one segment file and the sequence of its first record.
type segment struct {
	first uint64
	path  string
}

// listSegments returns dir's segments, in order.
func listSegments(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix) || strings.HasPrefix(name, ".") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(name, segmentSuffix), 10, 64)
		if err != nil || name != SegmentName(n) {
			return nil, fmt.Errorf("%s: unexpected segment name %q", dir, name)
		}
		segs = append(segs, segment{first: n, path: filepath.Join(dir, name)})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	return segs, nil
}

// lockLog takes the writer's lock on the log directory dir, then makes
// what is in it private: after the lock, so that a refused opener changes
// nothing.
func lockLog(dir string) (*framelog.Lock, error) {
	lock, err := framelog.LockDir(dir, lockName)
	if err != nil {
		return nil, err
	}
	if err := framelog.Private(dir); err != nil {
		lock.Release()
		return nil, err
	}
	return lock, nil
}

// ensureDir creates dir (mode 0700) if absent, refusing a path that is
// something else.
func ensureDir(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		return framelog.SyncDir(filepath.Dir(dir))
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (%s); a receipt log is a directory of segments", dir, fi.Mode().Type())
	}
	return nil
}

// BuildFunc produces the envelope for the given chain position. It runs
// under the log's mutex, so it must not block.
type BuildFunc func(seq uint64, prev *wire.ContentID) ([]byte, error)

// Append sequences one envelope and returns once it is durable. If build
// fails, nothing is consumed: the next Append gets the same sequence.
func (l *Log) Append(ctx context.Context, build BuildFunc) (uint64, wire.ContentID, error) {
	seq, id, _, err := l.appendAs(ctx, nil, build)
	return seq, id, err
}

// appendAs is Append for a steward whose key signs the envelope: it is
// refused unless the chain so far is signed by the same key. It also
// returns where the wait for durability went.
func (l *Log) appendAs(ctx context.Context, signer ed25519.PublicKey, build BuildFunc) (uint64, wire.ContentID, framelog.Took, error) {
	var took framelog.Took
	if err := ctx.Err(); err != nil {
		return 0, wire.ContentID{}, took, err
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return 0, wire.ContentID{}, took, ErrClosed
	case l.err != nil:
		if err := l.healLocked(); err != nil {
			l.mu.Unlock()
			return 0, wire.ContentID{}, took, err
		}
	}
	if signer != nil && l.steward != nil && !bytes.Equal(signer, l.steward) {
		l.mu.Unlock()
		return 0, wire.ContentID{}, took, fmt.Errorf("%w: its chain is signed by %x, not by %x; refusing to append", ErrForeignSteward, []byte(l.steward), []byte(signer))
	}
	seq := l.next
	var prev *wire.ContentID
	if seq > 0 {
		h := l.head
		prev = &h
	}
	env, err := build(seq, prev)
	if err == nil && (len(env) == 0 || len(env) > maxEnvelope) {
		err = fmt.Errorf("append receipt: envelope of %d bytes out of range", len(env))
	}
	if err == nil && seq > l.seg && l.w.Size() >= l.segBytes {
		err = l.rotateLocked()
	}
	var end framelog.Mark
	if err == nil {
		if end, err = l.w.Enqueue(env); err != nil {
			l.failLocked(err)
			err = fmt.Errorf("receipt log: %w", err)
		}
	}
	if err != nil {
		l.mu.Unlock()
		return 0, wire.ContentID{}, took, err
	}
	id := wire.ContentOf(env)
	l.head, l.next = id, seq+1
	if l.steward == nil && signer != nil {
		l.steward = signer
	}
	l.headSeg, l.headOff, l.headEnd, l.headEp = l.seg, end.End-framelog.HeaderSize-int64(len(env)), end.End, end.Epoch
	l.index.appended(seq, l.seg, l.headOff, env)
	l.notePendingLocked()
	w := l.w
	l.mu.Unlock()
	// The receipt is sequenced: it is waited for even if ctx ends now, so
	// that a caller never mistakes a durable receipt for a failed one.
	took, err = w.SyncTook(end)
	if err != nil {
		// Not durable, so never acknowledged: the heal that the next
		// append (or a readiness check) runs cuts it off and rolls the
		// head back past it. A sealer that comes here only after that
		// heal ran must not fail the healed log again (failWriter).
		l.failWriter(w, err)
		return 0, wire.ContentID{}, took, fmt.Errorf("receipt log: %w", err)
	}
	// Frames are written in order, so everything before this one is
	// durable too.
	for {
		cur := l.acked.Load()
		if seq+1 <= cur || l.acked.CompareAndSwap(cur, seq+1) {
			break
		}
	}
	l.durHead.note(seq+1, id)
	if l.ckEvery > 0 && l.key != nil && seq+1 >= l.checkpointed()+l.ckEvery && l.ckMu.TryLock() {
		_, err := l.checkpointLocked()
		l.ckMu.Unlock()
		switch {
		case errors.Is(err, ErrStorage):
			// The receipt is durable and acknowledged; the storage's
			// refusal fails the log until it heals, which retries the
			// checkpoint's file too.
			l.fail(err)
		case err != nil:
			return seq, id, took, fmt.Errorf("receipt %d is durable, but the checkpoint after it failed: %w", seq, err)
		}
	}
	return seq, id, took, nil
}

func (l *Log) checkpointed() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ckCount
}

// rotateLocked makes the current segment durable and starts the next one.
// Called with mu held. A failure leaves the current segment in place and
// fails the log until it heals; the next append then tries again.
func (l *Log) rotateLocked() error {
	// The old segment ends at its last frame, durably, before the new one
	// exists: only the last segment may hold padding.
	if err := l.w.Trim(); err != nil {
		l.failLocked(err)
		return fmt.Errorf("receipt log: %w", err)
	}
	f, err := framelog.OpenFile(filepath.Join(l.dir, SegmentName(l.next)), true)
	if err != nil {
		err = fmt.Errorf("%w: new segment: %w", ErrStorage, err)
		l.failLocked(err)
		return fmt.Errorf("receipt log: %w", err)
	}
	w, err := segFormat.Resume(l.wrap(f), framelog.Tail{}, l.noSync)
	if err != nil {
		l.failLocked(err)
		return fmt.Errorf("receipt log: new segment: %w", err)
	}
	w.Preallocate(l.prealloc, l.segBytes)
	if l.onSync != nil {
		w.ObserveSyncs(l.onSync)
	}
	l.oldSyncs += l.w.Syncs()
	// Everything in the old segment is durable (SyncAll above), so an
	// error closing it loses nothing.
	_ = l.w.Close()
	l.w, l.seg = w, l.next
	l.pend, l.base = l.pend[:0], l.headLocked()
	return nil
}

// Checkpoint makes the log durable up to its head and seals a checkpoint
// there (or returns the newest if nothing was appended since). It needs the
// log to have been opened with a Key.
func (l *Log) Checkpoint(ctx context.Context) (*SignedCheckpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l.key == nil {
		return nil, errors.New("receipt log: checkpoints need the steward key (LogOptions.Key)")
	}
	l.ckMu.Lock()
	defer l.ckMu.Unlock()
	return l.checkpointLocked()
}

// checkpointLocked is called with ckMu held.
func (l *Log) checkpointLocked() (*SignedCheckpoint, error) {
	l.mu.Lock()
	count, head, seg, off, end, w, latest := l.next, l.head, l.headSeg, l.headOff, framelog.Mark{End: l.headEnd, Epoch: l.headEp}, l.w, l.latest
	if seg != l.seg {
		w = nil // the head's segment was made durable when the log rotated or opened
	}
	closed := l.closed && l.ck == nil
	l.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if count == 0 || (latest != nil && latest.Count >= count) {
		return latest, nil
	}
	if w != nil {
		if err := w.Sync(end); err != nil {
			l.fail(err)
			return nil, fmt.Errorf("receipt log: %w", err)
		}
	}
	c := Checkpoint{Count: count, Head: head.String(), Segment: seg, HeadOffset: uint64(off), End: uint64(end.End),
		SealedMs: uint64(l.clock().UnixMilli())}
	if l.ledger != nil {
		s := l.ledger()
		c.Ledger = &s
	}
	advanced, err := l.bindWitness(&c, latest)
	if err != nil {
		return nil, err
	}
	cp, err := sealCheckpoint(l.key, c)
	if err != nil {
		return nil, err
	}
	ckEnd, err := l.ck.Enqueue(cp.Envelope)
	if err == nil {
		err = l.ck.Sync(ckEnd)
	}
	if err != nil {
		l.fail(err)
		return nil, fmt.Errorf("receipt log: write checkpoint: %w", err)
	}
	l.mu.Lock()
	l.latest, l.ckCount = cp, count
	l.mu.Unlock()
	if l.witness != nil && !advanced {
		if _, err := l.witness.Advance(context.Background(), *c.Witness); err != nil {
			return cp, fmt.Errorf("receipt log: checkpoint at %d sealed, but its rollback witness was not advanced (the next open catches it up): %w", count, err)
		}
	}
	return cp, nil
}

// Syncs returns how many fsyncs the log has made for its segments; with
// concurrent sealers it is well below the number of appends.
func (l *Log) Syncs() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.oldSyncs + l.w.Syncs()
}

// Next returns the sequence number the next Append will get.
func (l *Log) Next() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Head returns the content id of the last envelope (zero when empty).
func (l *Log) Head() wire.ContentID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head
}

// Steward returns the key that signed the log's records, or nil for an
// empty log opened without a key.
func (l *Log) Steward() ed25519.PublicKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.steward
}

// Close makes everything appended durable, seals a final checkpoint (with
// a Key), closes the files and releases the lock. Appends after Close fail
// with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	var err error
	if l.key != nil {
		l.ckMu.Lock()
		_, err = l.checkpointLocked()
		l.ckMu.Unlock()
	}
	if cerr := l.w.Close(); err == nil {
		err = cerr
	}
	if cerr := l.ck.Close(); err == nil {
		err = cerr
	}
	l.release()
	return err
}

func (l *Log) release() {
	if l.lock != nil {
		l.lock.Release()
		l.lock = nil
	}
}

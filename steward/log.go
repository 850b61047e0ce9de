package steward

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"meshd/wire"
)

// The log file is a fixed magic followed by frames:
//
//	u32 big-endian length | u32 big-endian CRC-32C of the envelope | envelope
//
// A frame that runs past the end of the file is a torn write; anything else
// that does not check out is damage.
var logMagic = []byte("MESHLOG1")

const (
	frameHeader = 8
	// maxEnvelope bounds a frame so a corrupted length cannot make the
	// scanner allocate gigabytes.
	maxEnvelope = 1 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrDamaged is wrapped when a log fails verification anywhere but a torn
// final frame. A damaged log is never repaired automatically.
var ErrDamaged = errors.New("receipt log damaged")

// ErrClosed is returned by Append on a closed log.
var ErrClosed = errors.New("receipt log closed")

// DamageError names the first bad sequence number of a damaged log.
type DamageError struct {
	Sequence uint64 // the position (0-based) of the first bad record
	Offset   int64  // byte offset of its frame
	Err      error
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("%v: first bad record is sequence %d (byte offset %d): %v", ErrDamaged, e.Sequence, e.Offset, e.Err)
}

func (e *DamageError) Unwrap() []error { return []error{ErrDamaged, e.Err} }

// ScanReport describes a log that checked out.
type ScanReport struct {
	Records uint64         // number of valid records
	Head    wire.ContentID // content id of the last envelope (zero if empty)
	Steward ed25519.PublicKey
	// TornBytes is the size of an incomplete final frame (0 if none);
	// TornAt the byte offset where it starts.
	TornBytes int64
	TornAt    int64
	// Size is the byte length of the valid prefix.
	Size int64
	// Last is the last verified receipt, or nil for an empty log.
	Last *Receipt
}

// Scan verifies a whole log read from r: the magic, every frame's CRC, every
// signature (by trusted, or if nil by the first record's steward, and then
// the same key throughout), every field rule, sequence continuity from 0 and
// every prev link. The visit function, if non-nil, sees each verified
// receipt in order. A torn final frame is reported, not an error.
func Scan(r io.Reader, trusted ed25519.PublicKey, visit func(*Opened) error) (*ScanReport, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	rep := &ScanReport{Steward: trusted}
	magic := make([]byte, len(logMagic))
	n, err := io.ReadFull(br, magic)
	switch {
	case n == 0 && err == io.EOF:
		return rep, nil
	case err == io.ErrUnexpectedEOF && bytes.HasPrefix(logMagic, magic[:n]):
		rep.TornBytes, rep.TornAt = int64(n), 0
		return rep, nil
	case err != nil && err != io.ErrUnexpectedEOF:
		return nil, fmt.Errorf("read receipt log: %w", err)
	case !bytes.Equal(magic[:n], logMagic):
		return nil, &DamageError{Sequence: 0, Offset: 0, Err: errors.New("not a meshd receipt log (bad magic)")}
	}
	off := int64(len(logMagic))
	rep.Size = off

	// Signatures dominate the cost, so frames are read in batches and the
	// batch is verified in parallel; the chain is then checked in order.
	const batch = 256
	workers := runtime.GOMAXPROCS(0)
	type item struct {
		off    int64
		env    []byte
		opened *Opened
		err    error
	}
	items := make([]item, 0, batch)
	var prev wire.ContentID
	seq := uint64(0)
	for done := false; !done; {
		items = items[:0]
		for len(items) < batch {
			var hdr [frameHeader]byte
			n, err := io.ReadFull(br, hdr[:])
			if n == 0 && err == io.EOF {
				done = true
				break
			}
			if err == io.ErrUnexpectedEOF {
				rep.TornAt, rep.TornBytes = off, int64(n)
				done = true
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read receipt log: %w", err)
			}
			length := binary.BigEndian.Uint32(hdr[0:4])
			if length == 0 || length > maxEnvelope {
				return nil, &DamageError{Sequence: seq + uint64(len(items)), Offset: off, Err: fmt.Errorf("frame length %d out of range", length)}
			}
			env := make([]byte, length)
			m, err := io.ReadFull(br, env)
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				rep.TornAt, rep.TornBytes = off, int64(frameHeader+m)
				done = true
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read receipt log: %w", err)
			}
			if crc32.Checksum(env, crcTable) != binary.BigEndian.Uint32(hdr[4:8]) {
				return nil, &DamageError{Sequence: seq + uint64(len(items)), Offset: off, Err: errors.New("frame checksum mismatch")}
			}
			items = append(items, item{off: off, env: env})
			off += int64(frameHeader) + int64(length)
		}
		if len(items) == 0 {
			break
		}
		if rep.Steward == nil {
			// Fix the key from the first record before verifying in
			// parallel, so every record is held to the same steward.
			o, err := OpenEnvelope(items[0].env, nil)
			if err != nil {
				return nil, &DamageError{Sequence: seq, Offset: items[0].off, Err: err}
			}
			rep.Steward = o.Key
		}
		var wg sync.WaitGroup
		next := make(chan int, len(items))
		for i := range items {
			next <- i
		}
		close(next)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					items[i].opened, items[i].err = OpenEnvelope(items[i].env, rep.Steward)
				}
			}()
		}
		wg.Wait()
		for _, it := range items {
			if it.err != nil {
				return nil, &DamageError{Sequence: seq, Offset: it.off, Err: it.err}
			}
			rc := it.opened.Receipt
			if rc.Sequence != seq {
				return nil, &DamageError{Sequence: seq, Offset: it.off, Err: fmt.Errorf("record carries sequence %d, want %d (removed or reordered record)", rc.Sequence, seq)}
			}
			if seq > 0 && *rc.Prev != prev.String() {
				return nil, &DamageError{Sequence: seq, Offset: it.off, Err: fmt.Errorf("prev %s does not match the previous envelope %s", *rc.Prev, prev)}
			}
			if visit != nil {
				if err := visit(it.opened); err != nil {
					return nil, fmt.Errorf("receipt log sequence %d: %w", seq, err)
				}
			}
			prev = it.opened.ID
			rep.Last = rc
			seq++
		}
		rep.Size = off
	}
	rep.Records = seq
	rep.Head = prev
	return rep, nil
}

// VerifyLogFile verifies the log at path without changing it.
func VerifyLogFile(path string, trusted ed25519.PublicKey, visit func(*Opened) error) (*ScanReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("verify receipt log: %w", err)
	}
	defer f.Close()
	rep, err := Scan(f, trusted, visit)
	if err != nil {
		return nil, fmt.Errorf("verify receipt log %s: %w", path, err)
	}
	return rep, nil
}

// Log is an append-only, hash-chained, durable receipt log.
//
// Appends from many goroutines go to one sequencer goroutine, which gives
// each its sequence number and prev link and builds (signs) it, in file
// order with no gaps; one flusher goroutine writes and fsyncs everything
// sequenced since its last round in one go (group commit). The chain makes
// signing inherently serial, so keeping it on one goroutine that never
// hands a lock around is what lets concurrent sealers reach the signing
// rate, while they share far fewer fsyncs than appends.
type Log struct {
	f      *os.File
	noSync bool

	// Owned by the sequencer goroutine.
	head wire.ContentID
	next atomic.Uint64

	mu      sync.Mutex
	pending []byte // frames sequenced but not yet handed to the flusher
	cur     *batch // the batch those frames belong to
	closed  bool
	err     error // sticky: after a failed write the in-memory head is unreliable
	users   sync.WaitGroup

	spare []byte // flusher-owned buffer swapped with pending
	syncs atomic.Uint64
	reqs  chan appendReq
	kick  chan struct{}
	quit  chan struct{}
	seqd  chan struct{}
	gone  chan struct{}
}

// batch is the set of appends made durable by one write+fsync.
type batch struct {
	done chan struct{}
	err  error // set before done is closed
}

type appendReq struct {
	build BuildFunc
	reply chan appendRes
}

type appendRes struct {
	seq uint64
	id  wire.ContentID
	b   *batch
	err error
}

// LogOptions tune OpenLog.
type LogOptions struct {
	// Trusted, if set, is the only key accepted on existing records.
	Trusted ed25519.PublicKey
	// NoSync skips fsync. Only for benchmarks that isolate CPU cost.
	NoSync bool
	// Visit, if set, sees every existing verified record during the scan.
	Visit func(*Opened) error
}

// OpenLog opens or creates the log at path. The existing content is
// verified in full; a torn final frame is cut off (and reported in the
// ScanReport), while any other damage refuses to open with a *DamageError.
func OpenLog(path string, opt LogOptions) (*Log, *ScanReport, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open receipt log: %w", err)
	}
	rep, err := Scan(f, opt.Trusted, opt.Visit)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open receipt log %s: %w", path, err)
	}
	size := rep.Size
	if rep.TornBytes > 0 || size < int64(len(logMagic)) {
		// Cut the torn tail (or a torn magic) and make the cut durable
		// before anything new is appended after it.
		if size < int64(len(logMagic)) {
			size = 0
		}
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("open receipt log %s: cut torn tail: %w", path, err)
		}
		created := size == 0
		if created {
			if _, err := f.WriteAt(logMagic, 0); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("open receipt log %s: write magic: %w", path, err)
			}
			size = int64(len(logMagic))
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("open receipt log %s: %w", path, err)
		}
		if created {
			// A new file's directory entry must be durable too, or a power
			// cut can lose the whole log along with receipts already returned.
			if err := syncDir(filepath.Dir(path)); err != nil {
				f.Close()
				return nil, nil, fmt.Errorf("open receipt log %s: %w", path, err)
			}
		}
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open receipt log %s: %w", path, err)
	}
	l := &Log{f: f, noSync: opt.NoSync, head: rep.Head, reqs: make(chan appendReq, 64),
		kick: make(chan struct{}, 1), quit: make(chan struct{}), seqd: make(chan struct{}), gone: make(chan struct{})}
	l.next.Store(rep.Records)
	go l.sequencer()
	go l.flusher()
	return l, rep, nil
}

// BuildFunc produces the envelope for the given chain position. It runs
// under the log's sequencing lock, so it must not block.
type BuildFunc func(seq uint64, prev *wire.ContentID) ([]byte, error)

// Append sequences one envelope and returns once it is durable. If build
// fails, nothing is consumed: the next Append gets the same sequence.
// build runs on the sequencer goroutine and must not block.
func (l *Log) Append(ctx context.Context, build BuildFunc) (uint64, wire.ContentID, error) {
	if err := ctx.Err(); err != nil {
		return 0, wire.ContentID{}, err
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return 0, wire.ContentID{}, ErrClosed
	case l.err != nil:
		l.mu.Unlock()
		return 0, wire.ContentID{}, l.err
	}
	l.users.Add(1)
	l.mu.Unlock()
	defer l.users.Done()

	reply := make(chan appendRes, 1)
	l.reqs <- appendReq{build: build, reply: reply}
	res := <-reply
	if res.err != nil {
		return 0, wire.ContentID{}, res.err
	}
	// The receipt is sequenced: it is waited for even if ctx ends now, so
	// that a caller never mistakes a durable receipt for a failed one.
	<-res.b.done
	if res.b.err != nil {
		return 0, wire.ContentID{}, res.b.err
	}
	return res.seq, res.id, nil
}

// sequencer assigns chain positions and builds envelopes, one at a time.
func (l *Log) sequencer() {
	defer close(l.seqd)
	for req := range l.reqs {
		req.reply <- l.sequence(req.build)
	}
}

func (l *Log) sequence(build BuildFunc) appendRes {
	seq := l.next.Load()
	var prev *wire.ContentID
	if seq > 0 {
		h := l.head
		prev = &h
	}
	env, err := build(seq, prev)
	if err == nil && (len(env) == 0 || len(env) > maxEnvelope) {
		err = fmt.Errorf("append receipt: envelope of %d bytes out of range", len(env))
	}
	if err != nil {
		return appendRes{err: err}
	}
	var hdr [frameHeader]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(len(env)))
	binary.BigEndian.PutUint32(hdr[4:8], crc32.Checksum(env, crcTable))
	id := wire.ContentOf(env)
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return appendRes{err: err}
	}
	l.pending = append(append(l.pending, hdr[:]...), env...)
	if l.cur == nil {
		l.cur = &batch{done: make(chan struct{})}
	}
	b := l.cur
	l.mu.Unlock()
	l.head = id
	l.next.Store(seq + 1)
	select {
	case l.kick <- struct{}{}:
	default: // a kick is already pending; the flusher will take this frame too
	}
	return appendRes{seq: seq, id: id, b: b}
}

// flusher makes each batch durable in sequence order until Close.
func (l *Log) flusher() {
	defer close(l.gone)
	for {
		quitting := false
		select {
		case <-l.kick:
		case <-l.quit:
			quitting = true
		}
		l.mu.Lock()
		b, buf, broken := l.cur, l.pending, l.err
		l.cur, l.pending = nil, l.spare[:0]
		l.mu.Unlock()
		if b != nil {
			err := broken
			if err == nil {
				_, err = l.f.Write(buf)
				if err == nil && !l.noSync {
					err = l.f.Sync()
				}
				l.syncs.Add(1)
				if err != nil {
					err = fmt.Errorf("receipt log write failed; reopen to recover: %w", err)
					l.mu.Lock()
					l.err = err
					l.mu.Unlock()
				}
			}
			b.err = err
			close(b.done)
		}
		l.spare = buf
		if quitting {
			return
		}
	}
}

// Syncs returns how many write+fsync rounds the log has made; with
// concurrent sealers it is well below the number of appends.
func (l *Log) Syncs() uint64 { return l.syncs.Load() }

// Next returns the sequence number the next Append will get.
func (l *Log) Next() uint64 { return l.next.Load() }

// Close makes everything already sequenced durable, stops the flusher and
// closes the file. Appends after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.users.Wait() // every Append admitted before Close is sequenced and durable
	close(l.reqs)
	<-l.seqd
	close(l.quit)
	<-l.gone
	return l.f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

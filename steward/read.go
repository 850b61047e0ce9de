package steward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"meshd/wire"
)

// indexEvery is how many records apart the in-memory read index marks a
// record's place: reads seek to the nearest mark at or before what they
// want and scan forward at most that many frames.
const indexEvery = 64

// readIndex remembers where some records start, so that paging through
// the log does not rescan a whole segment per page, and holds the newest
// records themselves (recent.go).
type readIndex struct {
	mu     sync.Mutex
	mark   map[uint64]place // sequence (a multiple of indexEvery) → where it starts
	recent recent
}

type place struct {
	seg uint64 // first sequence of its segment
	off int64  // offset of its frame
}

func (x *readIndex) note(seq, seg uint64, off int64) {
	if seq%indexEvery != 0 {
		return
	}
	x.mu.Lock()
	if x.mark == nil {
		x.mark = map[uint64]place{}
	}
	x.mark[seq] = place{seg, off}
	x.mu.Unlock()
}

// appended notes record seq, env, just enqueued at off in the segment
// starting at seg. Called under the log's mutex, in chain order.
func (x *readIndex) appended(seq, seg uint64, off int64, env []byte) {
	x.note(seq, seg, off)
	x.recent.keep(seq, env)
}

func (x *readIndex) near(seq uint64) (uint64, place, bool) {
	m := seq - seq%indexEvery
	x.mu.Lock()
	defer x.mu.Unlock()
	p, ok := x.mark[m]
	return m, p, ok
}

// errEnough stops a scan once a page is full.
var errEnough = errors.New("enough")

// Durable returns how many records are durable: every record with a lower
// sequence has been acknowledged to its sealer and can be read.
func (l *Log) Durable() uint64 { return l.acked.Load() }

// DurableHead returns a durable prefix of the log, its record count and
// the content id of its last record (zero when empty), as the log wrote
// them: the chain's head without reading or verifying a segment. The
// count may trail Durable by the sealers that are still returning.
func (l *Log) DurableHead() (uint64, wire.ContentID) {
	l.durHead.mu.Lock()
	defer l.durHead.mu.Unlock()
	return l.durHead.n, l.durHead.id
}

// durableHead is the newest durable record: its sequence plus one and
// its content id, kept together.
type durableHead struct {
	mu sync.Mutex
	n  uint64
	id wire.ContentID
}

// note records that the first n records are durable, the last being id;
// sealers finish out of order, so an older note changes nothing.
func (d *durableHead) note(n uint64, id wire.ContentID) {
	d.mu.Lock()
	if n > d.n {
		d.n, d.id = n, id
	}
	d.mu.Unlock()
}

// Range returns the envelopes of up to limit durable records starting at
// sequence from, in order; fewer (or none) when the log ends sooner. The
// newest records are answered from memory; older ones are read from the
// segment files, beside appends without holding them up. Either way the
// bytes are exactly as sealed, and only records already durable.
func (l *Log) Range(ctx context.Context, from uint64, limit int) ([][]byte, error) {
	end := l.Durable()
	if limit <= 0 || from >= end {
		return nil, nil
	}
	to := min(end, from+uint64(limit))
	if out, ok := l.index.recent.get(from, to); ok {
		return out, nil
	}
	segs, err := listSegments(l.dir)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	var out [][]byte
	for from < to {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].first > from }) - 1
		if i < 0 {
			return nil, fmt.Errorf("read receipts: no segment holds sequence %d", from)
		}
		seg := segs[i]
		got, err := l.readSegment(ctx, seg, from, to)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 {
			return nil, fmt.Errorf("read receipts: segment %s does not hold sequence %d", filepath.Base(seg.path), from)
		}
		out = append(out, got...)
		from += uint64(len(got))
	}
	return out, nil
}

// readSegment reads the records [from, to) that lie in seg, starting at
// the nearest indexed place.
func (l *Log) readSegment(ctx context.Context, seg segment, from, to uint64) ([][]byte, error) {
	f, err := os.Open(seg.path)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	defer f.Close()
	var out [][]byte
	visit := func(index uint64, off int64, body []byte) error {
		seq := seg.first + index
		l.index.note(seq, seg.first, off)
		if seq >= to {
			return errEnough
		}
		if seq >= from {
			out = append(out, body)
		}
		return nil
	}
	if m, p, ok := l.index.near(from); ok && p.seg == seg.first && m >= seg.first {
		if _, err := f.Seek(p.off, io.SeekStart); err != nil {
			return nil, fmt.Errorf("read receipts: %w", err)
		}
		_, err = segFormat.ScanFrom(ctx, f, p.off, m-seg.first, visit)
	} else {
		_, err = segFormat.Scan(ctx, f, visit)
	}
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("read receipts from %s: %w", filepath.Base(seg.path), err)
	}
	return out, nil
}

// cut forgets the marks at or past next: a heal rolled the log back there
// and those sequences will be taken by other records.
func (x *readIndex) cut(next uint64) {
	x.recent.cut(next)
	x.mu.Lock()
	for seq := range x.mark {
		if seq >= next {
			delete(x.mark, seq)
		}
	}
	x.mu.Unlock()
}

package steward

import "sync"

// The log keeps a copy of its newest records in memory, so that a reader
// that follows the head (the fleet publisher, a client paging the newest
// receipts) is answered without listing the directory, opening a segment
// and scanning to the record: after a restart, or once it falls more than
// recentKeep records behind, it reads the segments as before.
const (
	// recentKeep is how many of the newest records are kept: twice the
	// fleet publisher's default batch, so that a publisher a batch behind
	// still reads from memory.
	recentKeep = 256
	// recentMaxBody is the largest envelope kept (a receipt is about
	// 800 bytes); a larger one is read from its segment, which bounds the
	// copy to recentKeep × recentMaxBody bytes.
	recentMaxBody = 4 << 10
)

// recent is a ring of the newest appended records, by sequence. A record
// is kept when it is enqueued, under the log's mutex and so in chain
// order; it is only handed out once Durable covers it, so what a reader
// gets is what the segment holds durably. A heal that rolls the head back
// drops the records past it (cut).
type recent struct {
	mu   sync.Mutex
	slot [recentKeep]recentSlot
	// lo and hi bound the sequences held: [lo, hi), hi-lo <= recentKeep,
	// each in slot[seq%recentKeep]. Some may be absent (too large).
	lo, hi uint64
}

type recentSlot struct {
	seq  uint64
	ok   bool // body holds the record seq
	body []byte
}

// keep records env as record seq. A seq that does not follow the newest
// kept one (the first append after an open, after a heal's cut) starts
// the ring over.
func (r *recent) keep(seq uint64, env []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq != r.hi || r.hi == r.lo {
		r.lo, r.hi = seq, seq
	}
	s := &r.slot[seq%recentKeep]
	s.seq = seq
	if len(env) <= recentMaxBody {
		// The slot's buffer is reused: the envelope is copied, so that
		// what the sealer does with its own bytes later cannot change
		// what is read back.
		s.body, s.ok = append(s.body[:0], env...), true
	} else {
		s.body, s.ok = s.body[:0], false
	}
	r.hi = seq + 1
	if r.hi-r.lo > recentKeep {
		r.lo = r.hi - recentKeep
	}
}

// get returns copies of the records [from, to) if every one of them is
// held, and false otherwise.
func (r *recent) get(from, to uint64) ([][]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from < r.lo || to > r.hi || from >= to {
		return nil, false
	}
	size := 0
	for seq := from; seq < to; seq++ {
		s := &r.slot[seq%recentKeep]
		if !s.ok || s.seq != seq {
			return nil, false
		}
		size += len(s.body)
	}
	// One allocation for all the bodies, each capped at its own length
	// so that an append to one cannot run into the next.
	buf := make([]byte, 0, size)
	out := make([][]byte, 0, to-from)
	for seq := from; seq < to; seq++ {
		b := r.slot[seq%recentKeep].body
		start := len(buf)
		buf = append(buf, b...)
		out = append(out, buf[start:len(buf):len(buf)])
	}
	return out, true
}

// cut drops the records at or past next: a heal rolled the log back there
// and those sequences will be taken by other records.
func (r *recent) cut(next uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if next < r.hi {
		r.hi = max(next, r.lo)
	}
}

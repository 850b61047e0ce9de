package framelog

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// ErrClosed is returned by a Writer after Close.
var ErrClosed = errors.New("closed")

// ErrStorage is wrapped by every error a write, fsync or cut of a framed
// file returned: the storage under the file refused (ENOSPC, EIO, a short
// write). The store it belongs to refuses new work until Recover succeeds,
// which needs nothing but the storage to accept writes again.
var ErrStorage = errors.New("storage unavailable")

// ErrDiscarded is returned by Sync for a frame that a failed write took
// with it: Recover cut it off, and it was never durable.
var ErrDiscarded = errors.New("frame discarded by a failed write")

// File is what a Writer writes through: an *os.File, or in tests a layer
// that fails chosen writes and fsyncs.
type File interface {
	io.Writer
	io.WriterAt
	Seek(offset int64, whence int) (int64, error)
	Truncate(size int64) error
	Sync() error
	Close() error
	Name() string
}

// Mark is where an enqueued frame ends, in the writer's epoch at the time:
// Recover starts a new epoch, so that a frame it cut off is never mistaken
// for a later frame ending at the same offset.
type Mark struct {
	End   int64
	Epoch uint64
}

// Writer appends frames to one file with group commit: whoever needs a
// frame durable and finds no flush running writes and fsyncs everything
// queued so far, while later arrivals wait and are covered by the next
// round. An uncontended caller therefore writes on its own goroutine, with
// no hand-off to another.
type Writer struct {
	f      File
	noSync bool

	mu   sync.Mutex
	cond sync.Cond
	// queued, written and synced are file offsets: everything below written
	// is in the file, everything below synced is durable.
	pending, spare          []byte
	queued, written, synced int64
	flushing                bool
	err                     error
	syncs                   uint64
	onSync                  func(time.Duration)
	// epoch counts the recoveries; cuts[e] is the offset epoch e was cut
	// back to, so a frame of an earlier epoch is durable iff it ends at or
	// below its epoch's cut.
	epoch uint64
	cuts  []int64
	// chunk is the preallocation step (0: none), limit how far it goes;
	// the file is written (with frames or zeros) up to allocated, never
	// below written. zeros is the flusher's alone.
	chunk, limit, allocated int64
	zeros                   []byte
}

// Preallocate makes the writer keep the file written with zeros ahead of
// its frames, in steps of chunk bytes but never past limit (unless a frame
// itself ends past it), so that a frame's fsync overwrites blocks the file
// already has: on ext4 and xfs an fsync that does not grow the file needs
// no journal commit for its size and block map, and takes about half as
// long. The zeros are padding, not a torn tail (see the package doc), and
// Trim and Close cut them. Set it before the first write; it is ignored
// with noSync, where there is no fsync to save.
func (w *Writer) Preallocate(chunk, limit int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.noSync && chunk > 0 {
		w.chunk, w.limit = chunk, limit
	}
}

// zeroStep bounds one preallocating write.
const zeroStep = 256 << 10

// extend writes zeros from allocated up to the chunk boundary at or past
// need (within the limit) and returns the new allocated end. It is best
// effort: on a full disk the frame's own write (which needs less room)
// decides, so an error here is not one of the writer's; what was written
// before it still counts. Called by the flusher, unlocked.
func (w *Writer) extend(allocated, need int64) int64 {
	target := min((need+w.chunk-1)/w.chunk*w.chunk, max(w.limit, need))
	if w.zeros == nil {
		w.zeros = make([]byte, min(zeroStep, w.chunk))
	}
	for allocated < target {
		n, err := w.f.WriteAt(w.zeros[:min(int64(len(w.zeros)), target-allocated)], allocated)
		allocated += int64(n)
		if err != nil {
			break
		}
	}
	return allocated
}

// Footprint is the file's size as the writer left it: past the last
// enqueued frame, or past the padding after it.
func (w *Writer) Footprint() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.queued, w.allocated)
}

// ObserveSyncs makes the writer report how long each fsync took, for a
// latency histogram; set it before the first write.
func (w *Writer) ObserveSyncs(f func(time.Duration)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onSync = f
}

// NewWriter appends to f, whose valid content ends at end (the file is
// positioned and cut there by the caller).
func NewWriter(f File, end int64, noSync bool) *Writer {
	return newWriter(f, end, end, noSync)
}

// newWriter is NewWriter for a file whose zero padding runs to allocated.
func newWriter(f File, end, allocated int64, noSync bool) *Writer {
	w := &Writer{f: f, noSync: noSync, queued: end, written: end, synced: end, allocated: max(end, allocated)}
	w.cond.L = &w.mu
	return w
}

// Enqueue queues the frame of body and returns where it will end. Frames
// are written in the order they are enqueued.
func (w *Writer) Enqueue(body []byte) (Mark, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return Mark{}, w.err
	}
	w.pending = AppendFrame(w.pending, body)
	w.queued += HeaderSize + int64(len(body))
	return Mark{End: w.queued, Epoch: w.epoch}, nil
}

// Size is the offset past the last enqueued frame.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued
}

// Sync returns once the frame ending at m, and everything before it, is
// durable; or the error that kept it from being so (ErrDiscarded once
// Recover has cut it off).
func (w *Writer) Sync(m Mark) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushTo(m, true, nil)
}

// Took is where one Sync's time went: Write, the write(2) of the rounds it
// ran itself; Fsync, the rest (its fsyncs, and waiting for a round another
// caller ran).
type Took struct {
	Write, Fsync time.Duration
}

// SyncTook is Sync, telling where its time went.
func (w *Writer) SyncTook(m Mark) (Took, error) {
	t0 := time.Now()
	var took Took
	w.mu.Lock()
	err := w.flushTo(m, true, &took.Write)
	w.mu.Unlock()
	took.Fsync = time.Since(t0) - took.Write
	return took, err
}

// SyncAll makes everything enqueued so far durable.
func (w *Writer) SyncAll() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushTo(Mark{End: w.queued, Epoch: w.epoch}, true, nil)
}

// Write hands everything queued to the file without waiting for fsync,
// unless a flush is already running (which will take it along or leave it
// for the next one).
func (w *Writer) Write() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.flushing || w.written == w.queued {
		return w.err
	}
	return w.flushTo(Mark{End: w.queued, Epoch: w.epoch}, false, nil)
}

// flushTo is called with mu held; the write and fsync run unlocked. With
// wrote set, the time of the writes it runs is added to it.
func (w *Writer) flushTo(m Mark, durable bool, wrote *time.Duration) error {
	end := m.End
	if m.Epoch == w.epoch && end > w.queued {
		end = w.queued // nothing beyond what was enqueued can ever be flushed
	}
	done := func() bool {
		if durable {
			return w.synced >= end
		}
		return w.written >= end
	}
	for {
		if m.Epoch != w.epoch {
			// A recovery ran since the frame was enqueued: it kept
			// exactly the frames that were durable.
			if m.Epoch < uint64(len(w.cuts)) && end <= w.cuts[m.Epoch] {
				return nil
			}
			return fmt.Errorf("%w: %w", ErrStorage, ErrDiscarded)
		}
		if done() || w.err != nil {
			break
		}
		if w.flushing {
			w.cond.Wait()
			continue
		}
		w.flushing = true
		buf, target, from, alloc := w.pending, w.queued, w.written, w.allocated
		w.pending = w.spare[:0]
		w.mu.Unlock()
		var err error
		if len(buf) > 0 {
			t := time.Now()
			next := from + int64(len(buf))
			if w.chunk > 0 && next > alloc {
				alloc = w.extend(alloc, next)
			}
			_, err = w.f.Write(buf)
			// A short write may have grown the file less; Recover cuts
			// that back.
			alloc = max(alloc, next)
			if wrote != nil {
				*wrote += time.Since(t)
			}
		}
		synced := false
		if err == nil && durable && !w.noSync {
			t := time.Now()
			err = w.f.Sync()
			synced = true
			w.mu.Lock()
			obs := w.onSync
			w.mu.Unlock()
			if obs != nil {
				obs(time.Since(t))
			}
		}
		w.mu.Lock()
		w.flushing = false
		w.allocated = alloc
		w.spare = buf[:0]
		if err != nil {
			w.err = fmt.Errorf("%w: %w", ErrStorage, err)
		} else {
			w.written = target
			if durable {
				w.synced = target
				if synced {
					w.syncs++
				}
			}
		}
		w.cond.Broadcast()
	}
	if !done() {
		return w.err
	}
	return nil
}

// Recover brings a failed writer back: it cuts the file back to the end of
// the last durable frame (dropping whatever a failed or short write left
// after it, so no torn frame stays mid-file once appends resume), makes the
// cut durable, and starts a new epoch in which appends continue from there.
// Every frame it drops was enqueued but never reported durable: its Sync
// returns ErrDiscarded. It reports whether it cut: on a writer that has not
// failed it does nothing (frames in flight there will become durable).
// When the cut itself fails the writer stays failed and Recover may be
// called again.
func (w *Writer) Recover() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.flushing {
		w.cond.Wait()
	}
	switch {
	case w.err == nil:
		return false, nil
	case w.err == ErrClosed:
		return false, ErrClosed
	}
	if err := w.f.Truncate(w.synced); err != nil {
		return false, fmt.Errorf("%w: cut back to the last durable frame at byte %d: %w", ErrStorage, w.synced, err)
	}
	w.allocated = w.synced
	if !w.noSync {
		// The cut must be durable before anything follows it: a power cut
		// would otherwise leave the old bytes past the new frames' end.
		if err := w.f.Sync(); err != nil {
			return false, fmt.Errorf("%w: sync the cut at byte %d: %w", ErrStorage, w.synced, err)
		}
	}
	if _, err := w.f.Seek(w.synced, io.SeekStart); err != nil {
		return false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	w.cuts = append(w.cuts, w.synced)
	w.epoch++
	w.queued, w.written = w.synced, w.synced
	w.pending = w.pending[:0]
	w.err = nil
	w.cond.Broadcast()
	return true, nil
}

// Trim makes everything enqueued durable and cuts the zero padding after
// it, durably: a file that is finished (a segment the log rotates away
// from) ends at its last frame.
func (w *Writer) Trim() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.flushTo(Mark{End: w.queued, Epoch: w.epoch}, true, nil); err != nil {
		return err
	}
	for w.flushing {
		w.cond.Wait()
	}
	if w.err != nil {
		return w.err
	}
	if err := w.trimLocked(); err != nil {
		w.err = err
		w.cond.Broadcast()
		return err
	}
	return nil
}

// trimLocked cuts the padding after written; mu is held and no flush runs.
func (w *Writer) trimLocked() error {
	if w.allocated <= w.written {
		return nil
	}
	if err := w.f.Truncate(w.written); err != nil {
		return fmt.Errorf("%w: cut the padding at byte %d: %w", ErrStorage, w.written, err)
	}
	w.allocated = w.written
	if !w.noSync {
		if err := w.f.Sync(); err != nil {
			return fmt.Errorf("%w: sync the cut at byte %d: %w", ErrStorage, w.written, err)
		}
	}
	return nil
}

// Synced is the offset below which everything is durable.
func (w *Writer) Synced() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Syncs counts the fsyncs made; with concurrent writers it is well below
// the number of frames.
func (w *Writer) Syncs() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.syncs
}

// Err returns the error that failed the writer, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == ErrClosed {
		return nil
	}
	return w.err
}

// Close makes everything enqueued durable and closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.err == ErrClosed {
		w.mu.Unlock()
		return nil
	}
	err := w.flushTo(Mark{End: w.queued, Epoch: w.epoch}, true, nil)
	for w.flushing {
		w.cond.Wait()
	}
	if err == nil && w.err == nil {
		err = w.trimLocked()
	}
	if w.err == nil {
		w.err = ErrClosed
	}
	w.mu.Unlock()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	return err
}

package framelog

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrClosed is returned by a Writer after Close.
var ErrClosed = errors.New("closed")

// Writer appends frames to one file with group commit: whoever needs a
// frame durable and finds no flush running writes and fsyncs everything
// queued so far, while later arrivals wait and are covered by the next
// round. An uncontended caller therefore writes on its own goroutine, with
// no hand-off to another.
type Writer struct {
	f      *os.File
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
func NewWriter(f *os.File, end int64, noSync bool) *Writer {
	w := &Writer{f: f, noSync: noSync, queued: end, written: end, synced: end}
	w.cond.L = &w.mu
	return w
}

// Enqueue queues the frame of body and returns the offset at which it will
// end. Frames are written in the order they are enqueued.
func (w *Writer) Enqueue(body []byte) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	w.pending = AppendFrame(w.pending, body)
	w.queued += HeaderSize + int64(len(body))
	return w.queued, nil
}

// Size is the offset past the last enqueued frame.
func (w *Writer) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queued
}

// Sync returns once everything below end is durable.
func (w *Writer) Sync(end int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushTo(end, true)
}

// SyncAll makes everything enqueued so far durable.
func (w *Writer) SyncAll() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushTo(w.queued, true)
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
	return w.flushTo(w.queued, false)
}

// flushTo is called with mu held; the write and fsync run unlocked.
func (w *Writer) flushTo(end int64, durable bool) error {
	if end > w.queued {
		end = w.queued // nothing beyond what was enqueued can ever be flushed
	}
	done := func() bool {
		if durable {
			return w.synced >= end
		}
		return w.written >= end
	}
	for !done() && w.err == nil {
		if w.flushing {
			w.cond.Wait()
			continue
		}
		w.flushing = true
		buf, target := w.pending, w.queued
		w.pending = w.spare[:0]
		w.mu.Unlock()
		var err error
		if len(buf) > 0 {
			_, err = w.f.Write(buf)
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
		w.spare = buf[:0]
		if err != nil {
			w.err = fmt.Errorf("write failed; reopen to recover: %w", err)
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
	err := w.flushTo(w.queued, true)
	for w.flushing {
		w.cond.Wait()
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

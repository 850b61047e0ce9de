package framelog

import (
	"sync"
)

// Faults is a fault-injecting layer for the files the stores write, for
// tests: it fails chosen writes and fsyncs (counted from 1 across every
// file it wraps) and, while Down, every write and fsync, as a full disk or
// a failing device does. A failed write may first write a prefix of its
// buffer (a short write).
type Faults struct {
	mu     sync.Mutex
	writes int
	syncs  int
	wfail  map[int]Fault
	sfail  map[int]error
	shook  map[int]func()
	down   *Fault
}

// Fault is one injected failure: Err returned after Short bytes of the
// buffer were written.
type Fault struct {
	Err   error
	Short int
}

// FailWrite makes the nth write from the start (1-based, counting every
// write through the layer) fail with f.
func (x *Faults) FailWrite(n int, f Fault) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.wfail == nil {
		x.wfail = map[int]Fault{}
	}
	x.wfail[n] = f
}

// FailSync makes the nth fsync (1-based) fail with err.
func (x *Faults) FailSync(n int, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.sfail == nil {
		x.sfail = map[int]error{}
	}
	x.sfail[n] = err
}

// HookSync makes the nth fsync (1-based) call f first, outside the
// layer's lock, before it fails or goes through: a test orders another
// goroutine's work (an append, a heal) against a flush in flight.
func (x *Faults) HookSync(n int, f func()) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.shook == nil {
		x.shook = map[int]func(){}
	}
	x.shook[n] = f
}

// Down fails every write and fsync with f until Up.
func (x *Faults) Down(f Fault) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.down = &f
}

// Up ends Down.
func (x *Faults) Up() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.down = nil
}

// Counts returns how many writes and fsyncs went through the layer.
func (x *Faults) Counts() (writes, syncs int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.writes, x.syncs
}

// Wrap returns f seen through the layer.
func (x *Faults) Wrap(f File) File { return &faultFile{File: f, x: x} }

func (x *Faults) write() (Fault, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.writes++
	if x.down != nil {
		return *x.down, true
	}
	f, ok := x.wfail[x.writes]
	return f, ok
}

func (x *Faults) sync() error {
	x.mu.Lock()
	x.syncs++
	if f := x.shook[x.syncs]; f != nil {
		n := x.syncs
		x.mu.Unlock()
		f()
		x.mu.Lock()
		defer x.mu.Unlock()
		if x.down != nil {
			return x.down.Err
		}
		return x.sfail[n]
	}
	defer x.mu.Unlock()
	if x.down != nil {
		return x.down.Err
	}
	return x.sfail[x.syncs]
}

type faultFile struct {
	File
	x *Faults
}

func (f *faultFile) Write(b []byte) (int, error) {
	if ft, ok := f.x.write(); ok {
		n := min(ft.Short, len(b))
		if n > 0 {
			if m, err := f.File.Write(b[:n]); err != nil {
				return m, err
			}
		}
		return n, ft.Err
	}
	return f.File.Write(b)
}

func (f *faultFile) WriteAt(b []byte, off int64) (int, error) {
	if ft, ok := f.x.write(); ok {
		n := min(ft.Short, len(b))
		if n > 0 {
			if m, err := f.File.WriteAt(b[:n], off); err != nil {
				return m, err
			}
		}
		return n, ft.Err
	}
	return f.File.WriteAt(b, off)
}

func (f *faultFile) Sync() error {
	if err := f.x.sync(); err != nil {
		return err
	}
	return f.File.Sync()
}

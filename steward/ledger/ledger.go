package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"sync"

	"meshd/wire"
)

var magic = []byte("MESHLDG1")

const (
	frameHeader = 8
	recAccount  = 'A'
	recHold     = 'H'
	recSettle   = 'S'
	recRelease  = 'R'
	// maxBody bounds a frame so a corrupted length is recognised as such.
	maxBody = 64
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Errors wrapped by the ledger.
var (
	// ErrExhausted: the grant's remaining budget does not cover the hold.
	ErrExhausted = errors.New("grant budget exhausted")
	// ErrDamaged: the file is damaged somewhere other than a torn tail.
	ErrDamaged = errors.New("grant ledger damaged")
	// ErrMismatch: the receipt log and the ledger do not describe the same
	// history, or a grant was presented with a budget other than the one
	// recorded for it.
	ErrMismatch = errors.New("grant ledger and receipts disagree")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("grant ledger closed")
	// ErrNoHold: Settle or Release named a hold that is not open.
	ErrNoHold = errors.New("no such open hold")
)

// Options tune Open.
type Options struct {
	// NoSync skips fsync. Only for benchmarks that isolate CPU cost: without
	// it a hold is not durable when granted.
	NoSync bool
}

// Charge is what one sealed receipt debited from a grant.
type Charge struct {
	Grant     wire.ContentID
	Hold      uint64
	ChargedUJ uint64
	// Sequence is the receipt's position in its log, for error messages.
	Sequence uint64
}

// Recovery reports what Open found and repaired.
type Recovery struct {
	Records   int   // valid records replayed
	TornBytes int64 // size of the torn tail cut off (0 if none)
	// Settled open holds settled from their receipts; Released open holds
	// with no receipt; Corrected released or settled holds whose receipt
	// said otherwise.
	Settled, Released, Corrected int
}

// Balance is one grant's account.
type Balance struct {
	BudgetUJ    uint64
	SpentUJ     uint64 // sum of settled charges
	HeldUJ      uint64 // sum of open holds
	OpenHolds   int
	RemainingUJ uint64 // budget − spent − held, or 0
	OverdrawnUJ uint64 // spent + held − budget when that is positive
}

type account struct {
	budget, spent, held uint64
	open                int
}

func (a *account) used() (uint64, bool) {
	s, c := bits.Add64(a.spent, a.held, 0)
	return s, c != 0
}

func (a *account) remaining() uint64 {
	u, over := a.used()
	if over || u >= a.budget {
		return 0
	}
	return a.budget - u
}

func (a *account) balance() Balance {
	b := Balance{BudgetUJ: a.budget, SpentUJ: a.spent, HeldUJ: a.held, OpenHolds: a.open, RemainingUJ: a.remaining()}
	if u, over := a.used(); over {
		b.OverdrawnUJ = ^uint64(0)
	} else if u > a.budget {
		b.OverdrawnUJ = u - a.budget
	}
	return b
}

type holdState uint8

const (
	holdOpen holdState = iota + 1
	holdSettled
	holdReleased
)

type hold struct {
	grant   wire.ContentID
	amount  uint64
	state   holdState
	charged uint64
}

// Ledger is an open grant ledger. It is safe for concurrent use.
type Ledger struct {
	path   string
	f      *os.File
	noSync bool

	mu   sync.Mutex
	cond sync.Cond
	// pending holds encoded frames not yet written; queued, written and
	// synced are file offsets: everything below written is in the file,
	// everything below synced is durable.
	pending, spare          []byte
	queued, written, synced int64
	flushing                bool
	err                     error
	syncs                   int64 // flushes that synced, to judge group commit

	nextHold uint64
	accounts map[wire.ContentID]*account
	// holds has only the open holds once Open has returned.
	holds map[uint64]*hold
}

// Open opens or creates the ledger at path, replays it, cuts a torn tail,
// and reconciles it with charges: every receipt in the receipt log that
// carries a grant_id (gather them with a Collector while opening the log).
// See the package doc for the recovery rules.
func Open(path string, charges []Charge, opt Options) (*Ledger, *Recovery, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("open grant ledger: %w", err)
	}
	l := &Ledger{
		path: path, f: f, noSync: opt.NoSync,
		nextHold: 1,
		accounts: map[wire.ContentID]*account{},
		holds:    map[uint64]*hold{},
	}
	l.cond.L = &l.mu
	rec, err := l.load()
	if err == nil {
		err = l.reconcile(charges, rec)
	}
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open grant ledger %s: %w", path, err)
	}
	return l, rec, nil
}

// load replays the file and leaves it ready for appending.
func (l *Ledger) load() (*Recovery, error) {
	data, err := io.ReadAll(l.f)
	if err != nil {
		return nil, err
	}
	rec := &Recovery{}
	size := int64(len(data))
	good := int64(0)
	switch {
	case len(data) < len(magic) && string(data) == string(magic[:len(data)]):
		// Empty, or a torn magic: start afresh.
	case len(data) < len(magic) || string(data[:len(magic)]) != string(magic):
		return nil, fmt.Errorf("%w: not a meshd grant ledger (bad magic)", ErrDamaged)
	default:
		good = int64(len(magic))
		for off := good; off < size; {
			body, next, torn, err := frameAt(data, off)
			if torn {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%w: record %d at byte offset %d: %v", ErrDamaged, rec.Records, off, err)
			}
			if err := l.apply(body); err != nil {
				return nil, fmt.Errorf("%w: record %d at byte offset %d: %v", ErrDamaged, rec.Records, off, err)
			}
			rec.Records++
			off, good = next, next
		}
	}
	rec.TornBytes = size - good
	if good < len64(magic) {
		good = 0
	}
	if good != size || size == 0 {
		// Make the cut (and a fresh magic) durable before anything new is
		// appended after it.
		if err := l.f.Truncate(good); err != nil {
			return nil, fmt.Errorf("cut torn tail: %w", err)
		}
		if good == 0 {
			if _, err := l.f.WriteAt(magic, 0); err != nil {
				return nil, fmt.Errorf("write magic: %w", err)
			}
			good = len64(magic)
		}
		if err := l.sync(); err != nil {
			return nil, err
		}
	}
	if _, err := l.f.Seek(good, io.SeekStart); err != nil {
		return nil, err
	}
	l.queued, l.written, l.synced = good, good, good
	return rec, nil
}

func len64(b []byte) int64 { return int64(len(b)) }

// frameAt decodes the frame at off. torn reports a frame that can only be
// an unacknowledged final write: it runs past the end of the file, or it
// fails its check with nothing but zeros after its header.
func frameAt(data []byte, off int64) (body []byte, next int64, torn bool, err error) {
	size := int64(len(data))
	if size-off < frameHeader {
		return nil, 0, true, nil
	}
	n := int64(binary.BigEndian.Uint32(data[off:]))
	sum := binary.BigEndian.Uint32(data[off+4:])
	end := off + frameHeader + n
	if n == 0 || n > maxBody {
		if allZero(data[off:]) {
			return nil, 0, true, nil
		}
		return nil, 0, false, fmt.Errorf("frame length %d out of range", n)
	}
	if end > size {
		return nil, 0, true, nil
	}
	body = data[off+frameHeader : end]
	if crc32.Checksum(body, crcTable) != sum {
		if end == size || allZero(data[end:]) {
			return nil, 0, true, nil
		}
		return nil, 0, false, errors.New("frame checksum mismatch")
	}
	return body, end, false, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// apply replays one record into memory, refusing anything that contradicts
// what came before.
func (l *Ledger) apply(b []byte) error {
	if len(b) == 0 {
		return errors.New("empty record")
	}
	want := map[byte]int{recAccount: 41, recHold: 49, recSettle: 17, recRelease: 9}[b[0]]
	if want == 0 {
		return fmt.Errorf("unknown record type %#02x", b[0])
	}
	if len(b) != want {
		return fmt.Errorf("record %q is %d bytes, want %d", b[0], len(b), want)
	}
	switch b[0] {
	case recAccount:
		g := wire.ContentID(b[1:33])
		budget := binary.BigEndian.Uint64(b[33:])
		if _, dup := l.accounts[g]; dup {
			return fmt.Errorf("grant %s opened twice", g)
		}
		if budget == 0 {
			return fmt.Errorf("grant %s opened with a zero budget", g)
		}
		l.accounts[g] = &account{budget: budget}
	case recHold:
		id := binary.BigEndian.Uint64(b[1:])
		g := wire.ContentID(b[9:41])
		amount := binary.BigEndian.Uint64(b[41:])
		acc := l.accounts[g]
		switch {
		case id < l.nextHold:
			return fmt.Errorf("hold %d does not follow hold %d", id, l.nextHold-1)
		case acc == nil:
			return fmt.Errorf("hold %d on grant %s, which was never opened", id, g)
		case amount == 0:
			return fmt.Errorf("hold %d of zero µJ", id)
		}
		acc.held += amount
		acc.open++
		l.holds[id] = &hold{grant: g, amount: amount, state: holdOpen}
		l.nextHold = id + 1
	case recSettle:
		id := binary.BigEndian.Uint64(b[1:])
		h := l.holds[id]
		if h == nil {
			return fmt.Errorf("settle of unknown hold %d", id)
		}
		l.settle(h, binary.BigEndian.Uint64(b[9:]))
	case recRelease:
		id := binary.BigEndian.Uint64(b[1:])
		h := l.holds[id]
		if h == nil || h.state != holdOpen {
			return fmt.Errorf("release of hold %d, which is not open", id)
		}
		l.release(h)
	}
	return nil
}

// settle moves h to settled at charged, from any state: settling a
// released or settled hold is a correction made from its receipt.
func (l *Ledger) settle(h *hold, charged uint64) {
	acc := l.accounts[h.grant]
	switch h.state {
	case holdOpen:
		acc.held -= h.amount
		acc.open--
	case holdSettled:
		acc.spent -= h.charged
	}
	acc.spent = satAdd(acc.spent, charged)
	h.state, h.charged = holdSettled, charged
}

func (l *Ledger) release(h *hold) {
	acc := l.accounts[h.grant]
	acc.held -= h.amount
	acc.open--
	h.state = holdReleased
}

func satAdd(a, b uint64) uint64 {
	s, c := bits.Add64(a, b, 0)
	if c != 0 {
		return ^uint64(0)
	}
	return s
}

// reconcile applies the recovery rules and makes their records durable,
// then drops every closed hold from memory.
func (l *Ledger) reconcile(charges []Charge, rec *Recovery) error {
	byHold := make(map[uint64]Charge, len(charges))
	for _, c := range charges {
		if prev, dup := byHold[c.Hold]; dup {
			return fmt.Errorf("%w: receipts %d and %d both settle hold %d", ErrMismatch, prev.Sequence, c.Sequence, c.Hold)
		}
		h := l.holds[c.Hold]
		switch {
		case h == nil:
			return fmt.Errorf("%w: receipt %d settles hold %d, which this ledger never granted", ErrMismatch, c.Sequence, c.Hold)
		case h.grant != c.Grant:
			return fmt.Errorf("%w: receipt %d settles hold %d against grant %s, but the hold is on grant %s", ErrMismatch, c.Sequence, c.Hold, c.Grant, h.grant)
		}
		byHold[c.Hold] = c
		switch {
		case h.state == holdOpen:
			rec.Settled++
		case h.state == holdReleased || h.charged != c.ChargedUJ:
			rec.Corrected++
		default:
			continue
		}
		l.settle(h, c.ChargedUJ)
		l.enqueue(settleRecord(c.Hold, c.ChargedUJ))
	}
	for id, h := range l.holds {
		if h.state == holdOpen {
			l.release(h)
			l.enqueue(releaseRecord(id))
			rec.Released++
		}
	}
	for id, h := range l.holds {
		if h.state != holdOpen {
			delete(l.holds, id)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncTo(l.queued)
}

// Hold reserves amountUJ of grant's budget and returns the hold number once
// the hold is durable. budgetUJ is the grant's budget: it opens the account
// the first time a grant is seen and must match thereafter. A hold the
// remaining budget does not cover is refused with ErrExhausted and leaves
// the ledger unchanged.
func (l *Ledger) Hold(ctx context.Context, grant wire.ContentID, budgetUJ, amountUJ uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if amountUJ == 0 {
		return 0, errors.New("grant ledger: a hold must be of at least 1 µJ")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return 0, l.err
	}
	acc := l.accounts[grant]
	fresh := acc == nil
	switch {
	case fresh && budgetUJ == 0:
		return 0, fmt.Errorf("grant ledger: grant %s has a zero budget", grant)
	case fresh:
		acc = &account{budget: budgetUJ}
	case acc.budget != budgetUJ:
		return 0, fmt.Errorf("%w: grant %s presented with budget %d µJ, recorded with %d µJ", ErrMismatch, grant, budgetUJ, acc.budget)
	}
	if rem := acc.remaining(); amountUJ > rem {
		b := acc.balance()
		return 0, fmt.Errorf("%w: grant %s has %d µJ remaining (budget %d, spent %d, held %d), the request needs %d µJ",
			ErrExhausted, grant, rem, b.BudgetUJ, b.SpentUJ, b.HeldUJ, amountUJ)
	}
	if fresh {
		l.accounts[grant] = acc
		l.enqueue(accountRecord(grant, budgetUJ))
	}
	id := l.nextHold
	l.nextHold++
	acc.held += amountUJ
	acc.open++
	h := &hold{grant: grant, amount: amountUJ, state: holdOpen}
	l.holds[id] = h
	l.enqueue(holdRecord(id, grant, amountUJ))
	if err := l.syncTo(l.queued); err != nil {
		// The ledger is now failed; undo in memory so balances stay honest.
		l.release(h)
		delete(l.holds, id)
		return 0, err
	}
	l.kick()
	return id, nil
}

// Settle closes an open hold at the energy its sealed receipt charged. The
// record is written but not synced: recovery rebuilds it from the receipt.
func (l *Ledger) Settle(holdID, chargedUJ uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holds[holdID]
	if h == nil || h.state != holdOpen {
		return fmt.Errorf("grant ledger: settle hold %d: %w", holdID, ErrNoHold)
	}
	l.settle(h, chargedUJ)
	delete(l.holds, holdID)
	if l.err == nil {
		l.enqueue(settleRecord(holdID, chargedUJ))
		l.kick()
	}
	return nil
}

// Release closes an open hold of a serve that sealed nothing, returning the
// whole hold to the grant. Like Settle it is written but not synced.
func (l *Ledger) Release(holdID uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.holds[holdID]
	if h == nil || h.state != holdOpen {
		return fmt.Errorf("grant ledger: release hold %d: %w", holdID, ErrNoHold)
	}
	l.release(h)
	delete(l.holds, holdID)
	if l.err == nil {
		l.enqueue(releaseRecord(holdID))
		l.kick()
	}
	return nil
}

// Balance returns grant's account, and false if the ledger has never held
// against it.
func (l *Ledger) Balance(grant wire.ContentID) (Balance, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acc := l.accounts[grant]
	if acc == nil {
		return Balance{}, false
	}
	return acc.balance(), true
}

// Err returns the error that failed the ledger, if any. A failed ledger
// refuses new holds; reopen it to recover.
func (l *Ledger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == ErrClosed {
		return nil
	}
	return l.err
}

// Close writes and syncs everything pending and closes the file.
func (l *Ledger) Close() error {
	l.mu.Lock()
	for l.flushing {
		l.cond.Wait()
	}
	if l.err == ErrClosed {
		l.mu.Unlock()
		return nil
	}
	err := l.syncTo(l.queued)
	if l.err == nil {
		l.err = ErrClosed
	}
	l.mu.Unlock()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (l *Ledger) enqueue(body []byte) {
	var hdr [frameHeader]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(body)))
	binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(body, crcTable))
	l.pending = append(append(l.pending, hdr[:]...), body...)
	l.queued += int64(frameHeader + len(body))
}

// syncTo returns once everything below end is durable. Called with mu
// held; the write and fsync run unlocked, and whoever finds a flush in
// progress waits for it and then flushes everything queued since, so
// concurrent holders share one fsync.
func (l *Ledger) syncTo(end int64) error {
	for l.synced < end && l.err == nil {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flushing = true
		buf, target := l.pending, l.queued
		l.pending = l.spare[:0]
		l.mu.Unlock()
		var err error
		if len(buf) > 0 {
			_, err = l.f.Write(buf)
		}
		if err == nil {
			err = l.sync()
		}
		l.mu.Lock()
		l.flushing = false
		l.spare = buf[:0]
		if err != nil {
			l.err = fmt.Errorf("grant ledger write failed; reopen to recover: %w", err)
		} else {
			l.written, l.synced = target, target
			l.syncs++
		}
		l.cond.Broadcast()
	}
	if l.synced < end {
		return l.err
	}
	return nil
}

// kick writes whatever is pending without syncing, unless a flush is
// already running. Called with mu held.
func (l *Ledger) kick() {
	if l.flushing || len(l.pending) == 0 || l.err != nil {
		return
	}
	l.flushing = true
	buf, target := l.pending, l.queued
	l.pending = l.spare[:0]
	l.mu.Unlock()
	_, err := l.f.Write(buf)
	l.mu.Lock()
	l.flushing = false
	l.spare = buf[:0]
	if err != nil {
		l.err = fmt.Errorf("grant ledger write failed; reopen to recover: %w", err)
	} else {
		l.written = target
	}
	l.cond.Broadcast()
}

func (l *Ledger) sync() error {
	if l.noSync {
		return nil
	}
	return l.f.Sync()
}

func accountRecord(g wire.ContentID, budget uint64) []byte {
	b := make([]byte, 41)
	b[0] = recAccount
	copy(b[1:], g[:])
	binary.BigEndian.PutUint64(b[33:], budget)
	return b
}

func holdRecord(id uint64, g wire.ContentID, amount uint64) []byte {
	b := make([]byte, 49)
	b[0] = recHold
	binary.BigEndian.PutUint64(b[1:], id)
	copy(b[9:], g[:])
	binary.BigEndian.PutUint64(b[41:], amount)
	return b
}

func settleRecord(id, charged uint64) []byte {
	b := make([]byte, 17)
	b[0] = recSettle
	binary.BigEndian.PutUint64(b[1:], id)
	binary.BigEndian.PutUint64(b[9:], charged)
	return b
}

func releaseRecord(id uint64) []byte {
	b := make([]byte, 9)
	b[0] = recRelease
	binary.BigEndian.PutUint64(b[1:], id)
	return b
}

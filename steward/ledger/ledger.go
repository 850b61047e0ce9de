package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"sync"
	"time"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// format is the ledger's framing: the shared framelog frames after the
// magic "MESHLDG2".
var format = framelog.Format{Magic: "MESHLDG2", MaxBody: maxBody}

// oldMagic is the magic of the previous format, refused with ErrOldFormat.
const oldMagic = "MESHLDG1"

// Record types and their body sizes (type byte included).
const (
	recAccount  = 'A' // grant_id[32] budget u64 expires_unix_ms u64
	recHold     = 'H' // hold u64 grant_id[32] amount u64
	recSettle   = 'S' // hold u64 charged u64
	recRelease  = 'R' // hold u64
	recSnapAcct = 'P' // grant_id[32] budget u64 spent u64 expires_unix_ms u64
	recSnapHold = 'O' // hold u64 grant_id[32] amount u64
	recSnapEnd  = 'E' // next_hold u64 anchor_count u64 anchor_head[32]

	sizeAccount  = 1 + 32 + 8 + 8
	sizeHold     = 1 + 8 + 32 + 8
	sizeSettle   = 1 + 8 + 8
	sizeRelease  = 1 + 8
	sizeSnapAcct = 1 + 32 + 8 + 8 + 8
	sizeSnapHold = 1 + 8 + 32 + 8
	sizeSnapEnd  = 1 + 8 + 8 + 32

	// maxBody bounds a frame so a corrupted length is recognised as such.
	maxBody = 64
)

// Errors wrapped by the ledger.
var (
	// ErrExhausted: the grant's remaining budget does not cover the hold.
	ErrExhausted = errors.New("grant budget exhausted")
	// ErrDamaged: the file is damaged somewhere other than a torn tail.
	ErrDamaged = errors.New("grant ledger damaged")
	// ErrOldFormat: the file is a ledger of the previous format (MESHLDG1),
	// which this version does not read.
	ErrOldFormat = errors.New("grant ledger is in the previous format (MESHLDG1)")
	// ErrMismatch: the receipt log and the ledger do not describe the same
	// history, or a grant was presented with a budget (or expiry) other
	// than the one recorded for it.
	ErrMismatch = errors.New("grant ledger and receipts disagree")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("grant ledger closed")
	// ErrNoHold: Settle or Release named a hold that is not open.
	ErrNoHold = errors.New("no such open hold")
	// ErrLocked: another Ledger, in this process or another, has the
	// ledger open. The error names the path and, when known, the holder's
	// pid.
	ErrLocked = framelog.ErrLocked
)

// DefaultExpiryGrace is the ExpiryGrace used when Options leaves it zero.
const DefaultExpiryGrace = 24 * time.Hour

// Options tune Open.
type Options struct {
	// NoSync skips fsync. Only for benchmarks that isolate CPU cost: without
	// it a hold is not durable when granted.
	NoSync bool
	// Anchor ties a snapshot to the receipt log; see Compact for what it
	// must do. Without it the ledger never compacts on its own.
	Anchor func() (Anchor, error)
	// CompactEvery, with Anchor set, compacts the ledger automatically once
	// at least this many records have been appended since the last
	// snapshot and no hold is open: after a Settle or Release, and at Open
	// (where a file with records but no snapshot yet is compacted too). 0
	// never compacts automatically.
	CompactEvery int
	// ExpiryGrace is how long after its grant expired an account with no
	// open hold is kept; a snapshot omits it after that. 0 means
	// DefaultExpiryGrace; a negative value means no grace.
	ExpiryGrace time.Duration
	// Clock is the time compaction judges expiry by; nil means time.Now.
	Clock func() time.Time

	// files, if set, wraps every file the ledger appends to and its
	// storage probe: tests inject faults with it.
	files func(framelog.File) framelog.File
}

// Charge is what one sealed receipt debited from a grant.
type Charge struct {
	Grant     wire.ContentID
	Hold      uint64
	ChargedUJ uint64
	// Sequence is the receipt's position in its log. Charges whose
	// Sequence is below the snapshot's Anchor.Count are already reflected
	// in the snapshot and are ignored.
	Sequence uint64
}

// Recovery reports what Open found and repaired.
type Recovery struct {
	Records   int   // valid records replayed (snapshot records included)
	TornBytes int64 // size of the torn tail cut off (0 if none)
	// Settled open holds settled from their receipts; Released open holds
	// with no receipt; Corrected released or settled holds whose receipt
	// said otherwise.
	Settled, Released, Corrected int
	// Anchor is the anchor of the snapshot the file starts with, nil if it
	// has none. Charges below Anchor.Count were ignored.
	Anchor *Anchor
	// Compacted reports that Open compacted the file after recovery (see
	// Options.CompactEvery); CompactErr is why an attempt failed. A failed
	// compaction does not fail Open: the ledger works on, uncompacted.
	Compacted  bool
	CompactErr error
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

// Stats describes the ledger's state, for monitoring and tests.
type Stats struct {
	Accounts             int    // accounts in memory
	OpenHolds            int    // holds in memory; all of them are open
	RecordsSinceSnapshot int    // records appended after the snapshot
	Compactions          uint64 // snapshots written since Open
	LastCompactErr       error  // the last compaction's error, if it failed
	Syncs                uint64 // fsyncs of appended records since Open
}

type account struct {
	grant               wire.ContentID
	budget, spent, held uint64
	open                int
	expires             int64 // Unix ms; 0: unknown, the account never leaves
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
	acc     *account
	amount  uint64
	charged uint64
	state   holdState
}

// Ledger is an open grant ledger. It is safe for concurrent use.
type Ledger struct {
	path string
	opt  Options
	lock *framelog.Lock

	mu sync.Mutex
	w  *framelog.Writer
	// closed is set by Close; failed by a compaction that renamed the new
	// file in but could not make the rename durable.
	closed bool
	failed error

	nextHold uint64
	accounts map[wire.ContentID]*account
	// holds has only the open holds once Open has returned; while
	// replaying it also has the holds closed after the snapshot.
	holds map[uint64]*hold

	// Replay and compaction state.
	phase       replayPhase
	anchor      *Anchor
	sinceSnap   int
	compactions uint64
	compactErr  error
	oldSyncs    uint64 // fsyncs of writers replaced by compaction
}

type replayPhase uint8

const (
	phaseStart    replayPhase = iota // nothing replayed yet
	phaseSnapshot                    // inside the snapshot, before its end record
	phaseLog                         // after the snapshot, or a file without one
)

// Open opens or creates the ledger at path, taking its lock (an flock on
// the ledger file itself, whose pid goes to path+".lock" as information),
// replays it, cuts a torn tail, and reconciles it with charges: the grant
// debits of the receipt log's receipts, at least those from the snapshot's
// anchor on (see ReadAnchor). See the package doc for the recovery rules.
// A second Open of the same ledger, from this process or another, fails
// with ErrLocked until the first is closed.
func Open(path string, charges []Charge, opt Options) (*Ledger, *Recovery, error) {
	f, lock, err := openLocked(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open grant ledger: %w", err)
	}
	l := &Ledger{
		path: path, opt: opt, lock: lock,
		nextHold: 1,
		accounts: map[wire.ContentID]*account{},
		holds:    map[uint64]*hold{},
	}
	rec, err := l.load(f, charges)
	if err != nil {
		if l.w != nil {
			l.w.Close()
		}
		return nil, nil, fmt.Errorf("open grant ledger %s: %w", path, err)
	}
	return l, rec, nil
}

// openLocked opens (or creates) the ledger file and takes the lock on the
// file itself: a lock file beside it could be deleted and a second writer
// would lock a new one. Compaction replaces the file by rename and locks
// the new inode before the rename, so the inode the path names is always
// locked while a Ledger is open; an opener that locked an inode the path
// no longer names (the old file, released after the rename) tries again.
// The file is made private (0600).
func openLocked(path string) (*os.File, *framelog.Lock, error) {
	for range 8 {
		f, err := framelog.OpenFile(path, true)
		if err != nil {
			return nil, nil, err
		}
		lock, err := framelog.LockOpen(f, path, path+".lock")
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		fi, err := f.Stat()
		cur, lerr := os.Lstat(path)
		if err == nil && lerr == nil && os.SameFile(fi, cur) {
			if perm := fi.Mode().Perm(); perm&0o077 != 0 {
				if err := f.Chmod(perm &^ 0o077); err != nil {
					f.Close()
					return nil, nil, fmt.Errorf("make %s private: %w", path, err)
				}
			}
			framelog.WritePid(path + ".lock")
			return f, lock, nil
		}
		f.Close()
		if err == nil && lerr != nil && !errors.Is(lerr, fs.ErrNotExist) {
			err = lerr
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return nil, nil, fmt.Errorf("%s: %w (the file was replaced each time it was locked)", path, ErrLocked)
}

// load replays the file, cuts a torn tail, reconciles and, if due,
// compacts. On error the file is unchanged unless the error came after the
// cut.
func (l *Ledger) load(f *os.File, charges []Charge) (*Recovery, error) {
	removeTemps(l.path)
	var head [len(oldMagic)]byte
	if n, _ := f.ReadAt(head[:], 0); n == len(head) && string(head[:]) == oldMagic {
		f.Close()
		return nil, fmt.Errorf("%w: this meshd reads only MESHLDG2 ledgers; move the file aside to start a new one", ErrOldFormat)
	}
	rec := &Recovery{}
	tail, err := format.Scan(context.Background(), f, func(index uint64, off int64, body []byte) error {
		if err := l.apply(body); err != nil {
			return fmt.Errorf("%w: record %d at byte offset %d: %v", ErrDamaged, index, off, err)
		}
		rec.Records++
		return nil
	})
	if err == nil && l.phase == phaseSnapshot {
		err = fmt.Errorf("%w: the snapshot has no end record", ErrDamaged)
	}
	if err != nil {
		f.Close()
		var ce *framelog.CorruptError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w: %w", ErrDamaged, ce)
		}
		return nil, err
	}
	tail = tail.Cut() // the ledger does not preallocate: zeros are cut as a torn tail is
	rec.TornBytes = tail.Torn
	rec.Anchor = l.anchor
	l.w, err = format.Resume(l.wrap(f), tail, l.opt.NoSync)
	if err != nil {
		return nil, err
	}
	if err := l.reconcile(charges, rec); err != nil {
		return nil, err
	}
	if l.compactDue(l.anchor == nil && rec.Records > 0) {
		l.mu.Lock()
		err := l.compactLocked(l.opt.Anchor)
		l.mu.Unlock()
		rec.Compacted, rec.CompactErr = err == nil, err
	}
	return rec, nil
}

// apply replays one record into memory, refusing anything that contradicts
// what came before.
func (l *Ledger) apply(b []byte) error {
	want := recordSize(b[0])
	if want == 0 {
		return fmt.Errorf("unknown record type %#02x", b[0])
	}
	if len(b) != want {
		return fmt.Errorf("record %q is %d bytes, want %d", b[0], len(b), want)
	}
	switch b[0] {
	case recSnapAcct, recSnapHold, recSnapEnd:
		if l.phase == phaseLog {
			return fmt.Errorf("snapshot record %q after the snapshot", b[0])
		}
		l.phase = phaseSnapshot
	default:
		if l.phase == phaseSnapshot {
			return fmt.Errorf("record %q inside the snapshot", b[0])
		}
		l.phase = phaseLog
		l.sinceSnap++
	}
	u64 := func(off int) uint64 { return binary.BigEndian.Uint64(b[off:]) }
	switch b[0] {
	case recAccount, recSnapAcct:
		g := wire.ContentID(b[1:33])
		acc := &account{grant: g, budget: u64(33)}
		if b[0] == recAccount {
			acc.expires = int64(u64(41))
		} else {
			acc.spent, acc.expires = u64(41), int64(u64(49))
		}
		if _, dup := l.accounts[g]; dup {
			return fmt.Errorf("grant %s opened twice", g)
		}
		if acc.budget == 0 {
			return fmt.Errorf("grant %s opened with a zero budget", g)
		}
		if acc.expires < 0 {
			return fmt.Errorf("grant %s expires at %d ms", g, acc.expires)
		}
		l.accounts[g] = acc
	case recHold, recSnapHold:
		id := u64(1)
		g := wire.ContentID(b[9:41])
		amount := u64(41)
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
		l.holds[id] = &hold{acc: acc, amount: amount, state: holdOpen}
		l.nextHold = id + 1
	case recSettle:
		id := u64(1)
		h := l.holds[id]
		if h == nil {
			return fmt.Errorf("settle of unknown hold %d", id)
		}
		l.settle(h, u64(9))
	case recRelease:
		id := u64(1)
		h := l.holds[id]
		if h == nil || h.state != holdOpen {
			return fmt.Errorf("release of hold %d, which is not open", id)
		}
		l.release(h)
	case recSnapEnd:
		next := u64(1)
		if next < l.nextHold || next == 0 {
			return fmt.Errorf("snapshot's next hold %d is not above its open holds (next %d)", next, l.nextHold)
		}
		l.nextHold = next
		l.anchor = &Anchor{Count: u64(9), Head: wire.ContentID(b[17:49])}
		l.phase = phaseLog
	}
	return nil
}

// recordSize is the body size of a record of type typ, 0 for an unknown
// type.
func recordSize(typ byte) int {
	switch typ {
	case recAccount:
		return sizeAccount
	case recHold:
		return sizeHold
	case recSettle:
		return sizeSettle
	case recRelease:
		return sizeRelease
	case recSnapAcct:
		return sizeSnapAcct
	case recSnapHold:
		return sizeSnapHold
	case recSnapEnd:
		return sizeSnapEnd
	}
	return 0
}

// settle moves h to settled at charged, from any state: settling a
// released or settled hold is a correction made from its receipt.
func (l *Ledger) settle(h *hold, charged uint64) {
	acc := h.acc
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
	acc := h.acc
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
// then drops every closed hold from memory. Charges below the snapshot's
// anchor are already in the snapshot and are skipped.
func (l *Ledger) reconcile(charges []Charge, rec *Recovery) error {
	var from uint64
	if l.anchor != nil {
		from = l.anchor.Count
	}
	// Check every charge before changing anything, so that a refused Open
	// leaves the file as it found it.
	byHold := make(map[uint64]Charge)
	var todo []Charge
	for _, c := range charges {
		if c.Sequence < from {
			continue
		}
		if prev, dup := byHold[c.Hold]; dup {
			return fmt.Errorf("%w: receipts %d and %d both settle hold %d", ErrMismatch, prev.Sequence, c.Sequence, c.Hold)
		}
		h := l.holds[c.Hold]
		switch {
		case h == nil && l.anchor != nil:
			return fmt.Errorf("%w: receipt %d settles hold %d, which this ledger did not grant after its snapshot (anchored at receipt %d)", ErrMismatch, c.Sequence, c.Hold, from)
		case h == nil:
			return fmt.Errorf("%w: receipt %d settles hold %d, which this ledger never granted", ErrMismatch, c.Sequence, c.Hold)
		case h.acc.grant != c.Grant:
			return fmt.Errorf("%w: receipt %d settles hold %d against grant %s, but the hold is on grant %s", ErrMismatch, c.Sequence, c.Hold, c.Grant, h.acc.grant)
		}
		byHold[c.Hold] = c
		todo = append(todo, c)
	}
	for _, c := range todo {
		h := l.holds[c.Hold]
		switch {
		case h.state == holdOpen:
			rec.Settled++
		case h.state == holdReleased || h.charged != c.ChargedUJ:
			rec.Corrected++
		default:
			continue
		}
		l.settle(h, c.ChargedUJ)
		if err := l.append(settleRecord(c.Hold, c.ChargedUJ)); err != nil {
			return err
		}
	}
	for id, h := range l.holds {
		if h.state == holdOpen {
			l.release(h)
			if err := l.append(releaseRecord(id)); err != nil {
				return err
			}
			rec.Released++
		}
	}
	for id, h := range l.holds {
		if h.state != holdOpen {
			delete(l.holds, id)
		}
	}
	return l.w.SyncAll()
}

// append enqueues one record (called with mu held, or before Open returns).
func (l *Ledger) append(body []byte) error {
	_, err := l.enqueue(body)
	return err
}

func (l *Ledger) enqueue(body []byte) (framelog.Mark, error) {
	end, err := l.w.Enqueue(body)
	if err == nil {
		l.sinceSnap++
	}
	return end, err
}

// usable returns why the ledger may not take holds, if it may not. Called
// with mu held.
func (l *Ledger) usable() error {
	switch {
	case l.closed:
		return ErrClosed
	case l.failed == nil && l.w.Err() == nil:
		return nil
	}
	return l.healLocked()
}

// Hold reserves amountUJ of grant's budget and returns the hold number once
// the hold is durable. budgetUJ is the grant's budget: it opens the account
// the first time a grant is seen and must match thereafter. A hold the
// remaining budget does not cover is refused with ErrExhausted and leaves
// the ledger unchanged. An account Hold opens has no known expiry and never
// leaves the ledger; HoldUntil records the grant's expiry.
func (l *Ledger) Hold(ctx context.Context, grant wire.ContentID, budgetUJ, amountUJ uint64) (uint64, error) {
	return l.HoldUntil(ctx, grant, budgetUJ, time.Time{}, amountUJ)
}

// HoldUntil is Hold for a grant that expires at expires (its
// expires_unix_ms; the zero Time means unknown). The expiry lets
// compaction drop the account once the grant has been expired for longer
// than Options.ExpiryGrace and has no open hold: the authoriser refuses an
// expired grant before it asks the ledger, so such an account is never
// used again. A grant must be presented with the same expiry every time
// (ErrMismatch otherwise); an account opened by Hold learns its expiry
// from the first HoldUntil.
func (l *Ledger) HoldUntil(ctx context.Context, grant wire.ContentID, budgetUJ uint64, expires time.Time, amountUJ uint64) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if amountUJ == 0 {
		return 0, errors.New("grant ledger: a hold must be of at least 1 µJ")
	}
	var exp int64
	if !expires.IsZero() {
		exp = max(expires.UnixMilli(), 1)
	}
	l.mu.Lock()
	if err := l.usable(); err != nil {
		l.mu.Unlock()
		return 0, err
	}
	acc := l.accounts[grant]
	fresh := acc == nil
	switch {
	case fresh && budgetUJ == 0:
		l.mu.Unlock()
		return 0, fmt.Errorf("grant ledger: grant %s has a zero budget", grant)
	case fresh:
		acc = &account{grant: grant, budget: budgetUJ, expires: exp}
	case acc.budget != budgetUJ:
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: grant %s presented with budget %d µJ, recorded with %d µJ", ErrMismatch, grant, budgetUJ, acc.budget)
	case exp != 0 && acc.expires != 0 && acc.expires != exp:
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: grant %s presented with expiry %d ms, recorded with %d ms", ErrMismatch, grant, exp, acc.expires)
	}
	if rem := acc.remaining(); amountUJ > rem {
		b := acc.balance()
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: grant %s has %d µJ remaining (budget %d, spent %d, held %d), the request needs %d µJ",
			ErrExhausted, grant, rem, b.BudgetUJ, b.SpentUJ, b.HeldUJ, amountUJ)
	}
	id := l.nextHold
	var accEnd framelog.Mark
	if fresh {
		var err error
		if accEnd, err = l.enqueue(accountRecord(grant, budgetUJ, exp)); err != nil {
			l.mu.Unlock()
			return 0, fmt.Errorf("grant ledger: %w", err)
		}
	}
	end, err := l.enqueue(holdRecord(id, grant, amountUJ))
	if err != nil {
		l.mu.Unlock()
		return 0, fmt.Errorf("grant ledger: %w", err)
	}
	if fresh {
		l.accounts[grant] = acc
	} else if acc.expires == 0 {
		acc.expires = exp // persisted by the next snapshot
	}
	l.nextHold++
	acc.held += amountUJ
	acc.open++
	h := &hold{acc: acc, amount: amountUJ, state: holdOpen}
	l.holds[id] = h
	// The open hold keeps compaction, and so a switch of writer, away until
	// it closes.
	w := l.w
	l.mu.Unlock()
	if err := w.Sync(end); err != nil {
		// The writer has failed and refuses everything from now on; undo in
		// memory so that balances stay honest.
		l.mu.Lock()
		if l.holds[id] == h && h.state == holdOpen {
			l.release(h)
			delete(l.holds, id)
		}
		// An account whose opening record the failure took with it must
		// leave memory too, or the next hold on it would be written
		// without one. Every other hold on it came later in the file and
		// failed with it.
		if fresh && l.accounts[grant] == acc && w.Sync(accEnd) != nil {
			delete(l.accounts, grant)
		}
		l.mu.Unlock()
		return 0, fmt.Errorf("grant ledger: %w", err)
	}
	return id, nil
}

// Settle closes an open hold at the grant debit its sealed receipt states
// (x_grant_debit_uj). The record is written but not synced: recovery
// rebuilds it from the receipt.
func (l *Ledger) Settle(holdID, chargedUJ uint64) error {
	return l.close(holdID, "settle", func(h *hold) []byte {
		l.settle(h, chargedUJ)
		return settleRecord(holdID, chargedUJ)
	})
}

// Release closes an open hold of a serve that sealed nothing, returning the
// whole hold to the grant. Like Settle it is written but not synced.
func (l *Ledger) Release(holdID uint64) error {
	return l.close(holdID, "release", func(h *hold) []byte {
		l.release(h)
		return releaseRecord(holdID)
	})
}

func (l *Ledger) close(holdID uint64, what string, do func(*hold) []byte) error {
	l.mu.Lock()
	h := l.holds[holdID]
	if h == nil || h.state != holdOpen {
		l.mu.Unlock()
		return fmt.Errorf("grant ledger: %s hold %d: %w", what, holdID, ErrNoHold)
	}
	rec := do(h)
	delete(l.holds, holdID)
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if _, err := l.enqueue(rec); err != nil {
		// The writer has failed; Err reports it and holds are refused.
		l.mu.Unlock()
		return nil
	}
	if l.compactDue(false) {
		if err := l.compactLocked(l.opt.Anchor); err != nil {
			// Try again after another CompactEvery records, not after
			// every settlement.
			l.sinceSnap = 0
		}
	}
	w := l.w
	l.mu.Unlock()
	// A write error fails the writer; Err reports it. The closed hold is
	// rebuilt from its receipt (or released) on reopen.
	_ = w.Write()
	return nil
}

// Balance returns grant's account, and false if the ledger has no account
// for it (never held against, or dropped as expired by a compaction).
func (l *Ledger) Balance(grant wire.ContentID) (Balance, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acc := l.accounts[grant]
	if acc == nil {
		return Balance{}, false
	}
	return acc.balance(), true
}

// Balances returns every account the ledger holds, by grant: what the
// budget-remaining gauges of a monitoring system read.
func (l *Ledger) Balances() map[wire.ContentID]Balance {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[wire.ContentID]Balance, len(l.accounts))
	for g, acc := range l.accounts {
		out[g] = acc.balance()
	}
	return out
}

// Stats returns the ledger's counters.
func (l *Ledger) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		Accounts:             len(l.accounts),
		OpenHolds:            len(l.holds),
		RecordsSinceSnapshot: l.sinceSnap,
		Compactions:          l.compactions,
		LastCompactErr:       l.compactErr,
		Syncs:                l.oldSyncs + l.w.Syncs(),
	}
}

// Err returns the error that failed the ledger, if any. A failed ledger
// refuses new holds; reopen it to recover.
func (l *Ledger) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if l.failed != nil {
		return l.failed
	}
	if err := l.w.Err(); err != nil {
		return fmt.Errorf("grant ledger: %w", err)
	}
	return nil
}

// Close writes and syncs everything pending, closes the file and releases
// the lock.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	err := l.w.Close()
	if rerr := l.lock.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("close grant ledger %s: %w", l.path, err)
	}
	return nil
}

func accountRecord(g wire.ContentID, budget uint64, expires int64) []byte {
	b := make([]byte, sizeAccount)
	b[0] = recAccount
	copy(b[1:], g[:])
	binary.BigEndian.PutUint64(b[33:], budget)
	binary.BigEndian.PutUint64(b[41:], uint64(expires))
	return b
}

func holdRecord(id uint64, g wire.ContentID, amount uint64) []byte {
	return holdLike(recHold, id, g, amount)
}

func holdLike(typ byte, id uint64, g wire.ContentID, amount uint64) []byte {
	b := make([]byte, sizeHold)
	b[0] = typ
	binary.BigEndian.PutUint64(b[1:], id)
	copy(b[9:], g[:])
	binary.BigEndian.PutUint64(b[41:], amount)
	return b
}

func settleRecord(id, charged uint64) []byte {
	b := make([]byte, sizeSettle)
	b[0] = recSettle
	binary.BigEndian.PutUint64(b[1:], id)
	binary.BigEndian.PutUint64(b[9:], charged)
	return b
}

func releaseRecord(id uint64) []byte {
	b := make([]byte, sizeRelease)
	b[0] = recRelease
	binary.BigEndian.PutUint64(b[1:], id)
	return b
}

// removeTemps deletes snapshots a crash left before their rename. Called
// with the lock held.
func removeTemps(path string) {
	dir, base := splitPath(path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	prefix := tempPrefix(base)
	for _, e := range entries {
		if n := e.Name(); len(n) > len(prefix) && n[:len(prefix)] == prefix && e.Type().IsRegular() {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

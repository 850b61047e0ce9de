package steward

import (
	"compress/gzip"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"meshd/steward/internal/framelog"
)

// A disk budget (PROFILE.md §8) bounds the bytes a receipt log keeps in its
// directory. Past the budget, whole segments that lie before the newest
// checkpoint the node may reopen from are archived — compressed into an
// archive directory — or, where every receipt in them was acknowledged
// elsewhere (a fleet stream), removed. A receipt acknowledged nowhere else
// is never deleted: when the budget cannot be met without that, serves are
// refused (ErrStorage) instead.
const (
	archiveSuffix = ".gz"
	// manifestName lists, in the log directory, every segment that left
	// it: where it went, its digest and the sequences it held.
	manifestName = "archived.json"
)

// Archived is one segment that left the live log.
type Archived struct {
	// First and Next: the segment held sequences First..Next-1.
	First uint64 `json:"first"`
	Next  uint64 `json:"next"`
	// Path is where the compressed segment was written ("" when removed).
	Path string `json:"path,omitempty"`
	// Removed names who acknowledged every receipt of a segment that was
	// deleted rather than archived.
	Removed string `json:"removed,omitempty"`
	// SHA256 and Bytes describe the uncompressed segment.
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
	AtMs   int64  `json:"at_unix_ms"`
}

// ReadManifest returns the segments that left the log at dir, oldest
// first; none when nothing was ever archived.
func ReadManifest(dir string) ([]Archived, error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive manifest: %w", err)
	}
	var m []Archived
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("archive manifest %s: %w", filepath.Join(dir, manifestName), err)
	}
	for i := 1; i < len(m); i++ {
		if m[i].First != m[i-1].Next {
			return nil, fmt.Errorf("archive manifest %s: entry %d starts at %d, the one before ends at %d", filepath.Join(dir, manifestName), i, m[i].First, m[i-1].Next)
		}
	}
	return m, nil
}

// ArchiveName is the file name of segment first's compressed archive.
func ArchiveName(first uint64) string { return SegmentName(first) + archiveSuffix }

// BudgetOptions configure a Budget.
type BudgetOptions struct {
	// MaxBytes bounds the log directory's bytes; MaxShare bounds them to a
	// share (0..1) of the size of the filesystem holding it. With both the
	// smaller applies; with neither there is no limit (metrics only).
	MaxBytes int64
	MaxShare float64
	// ArchiveDir receives compressed segments; "" archives nothing.
	ArchiveDir string
	// Acked, if set, is how many receipts (from sequence 0) a stream
	// elsewhere has acknowledged, and AckedBy names it. A segment wholly
	// below it may be removed when there is no ArchiveDir.
	Acked   func() uint64
	AckedBy string
	// Keep, if set, is called before each pass: receipts from its result
	// on must stay readable in the live log (a ledger anchor, a publisher's
	// backlog). The pass never archives past the newest checkpoint at or
	// below it, so the log still opens from that checkpoint.
	Keep func() (uint64, error)
	// KeepWhy says, for refusals, what Keep keeps.
	KeepWhy string
	// Reserve is the room kept for receipts admitted before a pass runs:
	// serves are refused when the log is within Reserve of its limit. 0:
	// a sixteenth of the limit, at most 4 MiB.
	Reserve int64
	// Clock stamps the manifest and the growth rate; nil is time.Now.
	Clock func() time.Time
	// FSSize and FSFree report a filesystem's size and free bytes; nil
	// uses statfs(2). Tests pass fakes.
	FSSize func(dir string) (uint64, error)
	FSFree func(dir string) (uint64, error)
}

// Budget keeps a Log within its disk budget. Pass runs archiving; Admit is
// the one check a serve goes through; Stats feeds the metrics.
type Budget struct {
	log *Log
	opt BudgetOptions

	pass sync.Mutex // one pass at a time

	mu       sync.Mutex
	limit    int64 // 0: none
	closed   int64 // bytes of the files not being written (sealed segments, checkpoints, manifest)
	closedAt uint64
	gone     int64 // uncompressed bytes that left the log, ever
	manifest []Archived
	stuck    error  // why the last pass could not bring the log under its low water
	floor    uint64 // the last pass's keep floor
	samples  []sample
}

type sample struct {
	t       time.Time
	written int64
}

// rateWindow is how far back the growth rate looks.
const rateWindow = time.Hour

// NewBudget returns the budget of l. It finishes a pass a crash cut short
// (a stray temporary archive is removed; a segment whose archive is
// complete is removed from the log) before returning.
func NewBudget(l *Log, opt BudgetOptions) (*Budget, error) {
	if opt.MaxShare < 0 || opt.MaxShare > 1 {
		return nil, fmt.Errorf("disk budget: share %v is not between 0 and 1", opt.MaxShare)
	}
	if opt.MaxBytes < 0 {
		return nil, fmt.Errorf("disk budget: %d bytes is negative", opt.MaxBytes)
	}
	if opt.Clock == nil {
		opt.Clock = time.Now
	}
	if opt.FSSize == nil {
		opt.FSSize = fsSize
	}
	if opt.FSFree == nil {
		opt.FSFree = fsFree
	}
	b := &Budget{log: l, opt: opt}
	b.limit = opt.MaxBytes
	if opt.MaxShare > 0 {
		size, err := opt.FSSize(l.dir)
		if err != nil {
			return nil, fmt.Errorf("disk budget: size of the filesystem holding %s: %w", l.dir, err)
		}
		if s := int64(float64(size) * opt.MaxShare); b.limit == 0 || s < b.limit {
			b.limit = s
		}
	}
	if b.limit > 0 && b.opt.Reserve <= 0 {
		b.opt.Reserve = min(b.limit/16, 4<<20)
	}
	m, err := ReadManifest(l.dir)
	if err != nil {
		return nil, err
	}
	b.manifest = m
	for _, a := range m {
		b.gone += a.Bytes
	}
	if opt.ArchiveDir != "" {
		if err := os.MkdirAll(opt.ArchiveDir, 0o700); err != nil {
			return nil, fmt.Errorf("disk budget: archive directory: %w", err)
		}
		if err := removeTemps(opt.ArchiveDir); err != nil {
			return nil, err
		}
	}
	if err := b.resume(); err != nil {
		return nil, err
	}
	if err := b.measure(); err != nil {
		return nil, err
	}
	return b, nil
}

// Limit is the budget in bytes (0: none).
func (b *Budget) Limit() int64 { return b.limit }

// Due says whether a pass could change anything now: the log is past its
// low water, so a pass moves segments out or records why it cannot, or it
// rotated since the closed files were measured. Below it a pass would
// only measure; a caller that passes after each seal asks Due first and
// spares every serve a directory scan and a hand-off to its pass. Due
// itself never scans: it is on the serve's path.
func (b *Budget) Due() bool {
	if b.limit == 0 {
		return false
	}
	seg, size := b.log.writing()
	b.mu.Lock()
	stale, closed := seg != b.closedAt, b.closed
	b.mu.Unlock()
	return stale || closed+size > b.lowWater()
}

// Manifest returns the segments that left the log, oldest first.
func (b *Budget) Manifest() []Archived {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Archived(nil), b.manifest...)
}

// resume finishes what a crash between renaming an archive into place and
// removing its segment left: the manifest names the segment, or its
// archive is complete, so the live copy goes.
func (b *Budget) resume() error {
	segs, err := listSegments(b.log.dir)
	if err != nil {
		return err
	}
	for _, a := range b.manifest {
		for _, s := range segs {
			if s.first == a.First {
				if a.Path != "" {
					if err := checkArchive(a.Path, a.SHA256); err != nil {
						return fmt.Errorf("disk budget: segment %s is still in the log and its archive does not match: %w", SegmentName(a.First), err)
					}
				}
				if err := removeSegment(s.path); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writing returns the first sequence and size of the segment being
// written.
func (l *Log) writing() (uint64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// What the segment takes on disk: its padding too.
	return l.seg, l.w.Footprint()
}

// checkpointsUpTo returns the newest checkpoint covering at most count
// receipts, or nil.
func (l *Log) checkpointsUpTo(ctx context.Context, count uint64) (*SignedCheckpoint, error) {
	l.mu.Lock()
	latest, key := l.latest, l.steward
	l.mu.Unlock()
	if latest == nil || latest.Count <= count {
		return latest, nil
	}
	_, cks, _, err := readCheckpoints(ctx, l.dir, key, false)
	if err != nil {
		return nil, err
	}
	var best *SignedCheckpoint
	for _, cp := range cks {
		if cp.Count <= count {
			best = cp
		}
	}
	return best, nil
}

// measure recounts the bytes of the files not being written.
func (b *Budget) measure() error {
	seg, _ := b.log.writing()
	ents, err := os.ReadDir(b.log.dir)
	if err != nil {
		return fmt.Errorf("disk budget: %w", err)
	}
	var n int64
	for _, e := range ents {
		if e.Name() == SegmentName(seg) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("disk budget: %w", err)
		}
		n += fi.Size()
	}
	b.mu.Lock()
	b.closed, b.closedAt = n, seg
	b.mu.Unlock()
	return nil
}

// Bytes is the log directory's size now: what was measured of the closed
// files and the segment being written.
func (b *Budget) Bytes() int64 {
	seg, size := b.log.writing()
	b.mu.Lock()
	stale := seg != b.closedAt
	b.mu.Unlock()
	if stale {
		// The log rotated since: the old segment is closed now.
		if err := b.measure(); err != nil {
			b.mu.Lock()
			b.stuck = err
			b.mu.Unlock()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed + size
}

// Admit says whether the log may take another receipt: nil, or an error
// wrapping ErrStorage that names the cause. It is the one place the budget
// refuses a serve.
func (b *Budget) Admit() error {
	if b.limit == 0 {
		return nil
	}
	n := b.Bytes()
	if n+b.opt.Reserve <= b.limit {
		return nil
	}
	b.mu.Lock()
	why := b.stuck
	b.mu.Unlock()
	msg := fmt.Sprintf("the receipt log holds %d bytes, its budget is %d (%d kept in reserve)", n, b.limit, b.opt.Reserve)
	if why == nil {
		why = errors.New("no segment may leave the log yet")
	}
	return fmt.Errorf("%w: %s: %w", ErrStorage, msg, why)
}

// PassReport says what a pass did.
type PassReport struct {
	Moved []Archived
	// Bytes is the log's size after the pass.
	Bytes int64
}

// lowWater is the size past which a pass moves segments out: one
// segment's room below the limit less the reserve, so that the segment
// being written can fill without meeting the limit.
func (b *Budget) lowWater() int64 {
	return max(0, b.limit-b.opt.Reserve-b.log.segBytes)
}

// Pass archives or removes whole segments, oldest first, while the log is
// above its low water, and records why it could not get below it (Admit
// names that cause when it refuses).
func (b *Budget) Pass(ctx context.Context) (*PassReport, error) {
	b.pass.Lock()
	defer b.pass.Unlock()
	rep, err := b.pass1(ctx)
	b.mu.Lock()
	b.stuck = err
	b.mu.Unlock()
	if rep != nil {
		b.note()
	}
	return rep, err
}

func (b *Budget) pass1(ctx context.Context) (*PassReport, error) {
	if err := b.measure(); err != nil {
		return nil, err
	}
	rep := &PassReport{Bytes: b.Bytes()}
	if b.limit == 0 || rep.Bytes <= b.lowWater() {
		return rep, nil
	}
	cands, err := b.Eligible(ctx)
	if err != nil {
		return rep, err
	}
	for _, s := range cands {
		if rep.Bytes <= b.lowWater() {
			break
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		a, err := b.move(s)
		if err != nil {
			return rep, err
		}
		rep.Moved = append(rep.Moved, *a)
		if err := b.measure(); err != nil {
			return rep, err
		}
		rep.Bytes = b.Bytes()
	}
	if rep.Bytes > b.lowWater() {
		return rep, b.blocked(cands)
	}
	return rep, nil
}

// blocked explains why nothing more may leave the log.
func (b *Budget) blocked(cands []SegmentCandidate) error {
	if b.opt.ArchiveDir == "" && b.opt.Acked == nil {
		return errors.New("no archive directory and no stream acknowledges receipts: no segment may leave the log")
	}
	if len(cands) > 0 && b.opt.ArchiveDir == "" {
		return fmt.Errorf("segment %s holds receipts up to %d, which %s has not all acknowledged (acknowledged: below %d); without an archive directory they are never deleted",
			SegmentName(cands[0].First), cands[0].Next-1, b.ackedBy(), b.opt.Acked())
	}
	b.mu.Lock()
	floor := b.floor
	b.mu.Unlock()
	why := ""
	if b.opt.KeepWhy != "" {
		why = " (" + b.opt.KeepWhy + ")"
	}
	return fmt.Errorf("receipts from %d on must stay in the live log%s, and every segment before the newest checkpoint at or below it has left", floor, why)
}

func (b *Budget) ackedBy() string {
	if b.opt.AckedBy != "" {
		return b.opt.AckedBy
	}
	return "the stream"
}

// SegmentCandidate is a segment a pass may move out of the log.
type SegmentCandidate struct {
	First, Next uint64
	Path        string
	// Removable: every receipt in it was acknowledged elsewhere.
	Removable bool
}

// Eligible lists, oldest first, the segments a pass may move out: those
// wholly before the segment of the newest checkpoint at or below what
// Keep keeps, so the log reopens from that checkpoint. With no
// ArchiveDir only segments every receipt of which was acknowledged are
// listed, and a segment with an unacknowledged receipt ends the list.
func (b *Budget) Eligible(ctx context.Context) ([]SegmentCandidate, error) {
	floor := b.log.Durable()
	if b.opt.Keep != nil {
		k, err := b.opt.Keep()
		if err != nil {
			return nil, fmt.Errorf("disk budget: %w", err)
		}
		floor = min(floor, k)
	}
	b.mu.Lock()
	b.floor = floor
	b.mu.Unlock()
	cp, err := b.log.checkpointsUpTo(ctx, floor)
	if err != nil {
		return nil, fmt.Errorf("disk budget: %w", err)
	}
	if cp == nil {
		return nil, nil
	}
	segs, err := listSegments(b.log.dir)
	if err != nil {
		return nil, fmt.Errorf("disk budget: %w", err)
	}
	acked := uint64(0)
	if b.opt.Acked != nil {
		acked = b.opt.Acked()
	}
	var out []SegmentCandidate
	for i := 0; i+1 < len(segs) && segs[i+1].first <= cp.Segment; i++ {
		c := SegmentCandidate{First: segs[i].first, Next: segs[i+1].first, Path: segs[i].path}
		c.Removable = b.opt.Acked != nil && c.Next <= acked
		if b.opt.ArchiveDir == "" && !c.Removable {
			if len(out) == 0 {
				return nil, b.unacked(c)
			}
			break
		}
		out = append(out, c)
	}
	return out, nil
}

func (b *Budget) unacked(c SegmentCandidate) error {
	return fmt.Errorf("segment %s holds receipts up to %d, which %s has not all acknowledged (acknowledged: below %d); without an archive directory they are never deleted",
		SegmentName(c.First), c.Next-1, b.ackedBy(), b.opt.Acked())
}

// move archives (or, with no archive directory, removes) one candidate
// and records it in the manifest. The order makes a crash anywhere leave
// the segment or its complete archive: compress to a temporary name,
// fsync, check it decompresses to the same bytes, rename, fsync the
// directory, record it in the manifest, and only then remove the segment.
func (b *Budget) move(c SegmentCandidate) (*Archived, error) {
	if b.opt.ArchiveDir == "" && !c.Removable {
		return nil, b.unacked(c) // never reached: Eligible does not list it
	}
	sum, n, err := digestFile(c.Path)
	if err != nil {
		return nil, fmt.Errorf("disk budget: %w", err)
	}
	a := Archived{First: c.First, Next: c.Next, SHA256: sum, Bytes: n, AtMs: b.opt.Clock().UnixMilli()}
	if b.opt.ArchiveDir != "" {
		dst := filepath.Join(b.opt.ArchiveDir, ArchiveName(c.First))
		if err := compressFile(c.Path, dst, sum); err != nil {
			return nil, fmt.Errorf("disk budget: archive %s: %w", SegmentName(c.First), err)
		}
		a.Path = dst
	} else {
		a.Removed = b.ackedBy()
	}
	b.mu.Lock()
	m := append(append([]Archived(nil), b.manifest...), a)
	b.mu.Unlock()
	body, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, err
	}
	if err := framelog.WriteAtomic(filepath.Join(b.log.dir, manifestName), append(body, '\n')); err != nil {
		return nil, fmt.Errorf("disk budget: manifest: %w", err)
	}
	b.mu.Lock()
	b.manifest, b.gone = m, b.gone+n
	b.mu.Unlock()
	if err := removeSegment(c.Path); err != nil {
		return nil, err
	}
	return &a, nil
}

func removeSegment(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disk budget: remove %s: %w", path, err)
	}
	if err := framelog.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("disk budget: %w", err)
	}
	return nil
}

// digestFile returns the hex SHA-256 and length of a file.
func digestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// compressFile writes src gzipped to dst through a temporary file beside
// it, checked against sum before it is renamed into place.
func compressFile(src, dst, sum string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(name)
		}
	}()
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.Name = filepath.Base(src)
	if _, err = io.Copy(zw, in); err != nil {
		return err
	}
	if err = zw.Close(); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = checkArchive(name, sum); err != nil {
		return err
	}
	if err = os.Rename(name, dst); err != nil {
		return err
	}
	return framelog.SyncDir(filepath.Dir(dst))
}

// checkArchive proves the archive at path decompresses to the segment
// whose digest is sum.
func checkArchive(path, sum string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, zr); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("%s decompresses to sha256 %s, want %s", path, got, sum)
	}
	return nil
}

// removeTemps deletes temporary archives a crash left in dir.
func removeTemps(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("disk budget: %w", err)
	}
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".") && strings.Contains(n, archiveSuffix+".tmp") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("disk budget: %w", err)
			}
		}
	}
	return nil
}

// note records a sample of the bytes ever written, for the growth rate.
func (b *Budget) note() {
	n := b.Bytes()
	now := b.opt.Clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples = append(b.samples, sample{t: now, written: n + b.gone})
	i := 0
	for i < len(b.samples)-2 && now.Sub(b.samples[i].t) > rateWindow {
		i++
	}
	b.samples = b.samples[i:]
}

// Note records a sample for the growth rate without a pass.
func (b *Budget) Note() { b.note() }

// BudgetStats are the budget's figures for monitoring.
type BudgetStats struct {
	Bytes int64 // the log directory's size
	Limit int64 // 0: none
	// Growth is bytes written per second over the last hour of samples
	// (archived bytes count as written), 0 until two samples span time.
	Growth float64
	// DaysLeft is how long, at Growth, until the log reaches its limit (or,
	// without one, fills its filesystem): the time the node keeps serving
	// if nothing more could leave the log. Negative: not known.
	DaysLeft float64
	// Archived are the segments that left the log.
	Archived []Archived
}

// Stats returns the budget's figures.
func (b *Budget) Stats() BudgetStats {
	st := BudgetStats{Bytes: b.Bytes(), Limit: b.limit, DaysLeft: -1}
	b.mu.Lock()
	if k := len(b.samples); k >= 2 {
		first, last := b.samples[0], b.samples[k-1]
		if dt := last.t.Sub(first.t).Seconds(); dt > 0 {
			st.Growth = float64(last.written-first.written) / dt
		}
	}
	st.Archived = append([]Archived(nil), b.manifest...)
	b.mu.Unlock()
	room := b.limit - st.Bytes
	if b.limit == 0 {
		free, err := b.opt.FSFree(b.log.dir)
		if err != nil {
			return st
		}
		room = int64(free)
	}
	if st.Growth > 0 {
		st.DaysLeft = max(0, float64(room)) / st.Growth / 86400
	}
	return st
}

func fsSize(dir string) (uint64, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return s.Blocks * uint64(s.Bsize), nil
}

func fsFree(dir string) (uint64, error) {
	var s syscall.Statfs_t
	if err := syscall.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return s.Bavail * uint64(s.Bsize), nil
}

// Ranges says, for messages, which sequences left the log and where.
func Ranges(m []Archived) []string {
	var out []string
	for i := 0; i < len(m); {
		j := i
		dir := filepath.Dir(m[i].Path)
		for j+1 < len(m) && (m[j+1].Path == "") == (m[i].Path == "") && filepath.Dir(m[j+1].Path) == dir && m[j+1].Removed == m[i].Removed {
			j++
		}
		where := "archived in " + dir
		if m[i].Path == "" {
			where = "removed, acknowledged by " + m[i].Removed
		}
		out = append(out, fmt.Sprintf("sequences %d..%d %s (%d segments)", m[i].First, m[j].Next-1, where, j-i+1))
		i = j + 1
	}
	return out
}

// LiveAnchor returns the checkpoint a verifier of a log whose first
// segments left it starts from: the oldest one in the log's first live
// segment, so as much of the live log as possible is verified. Nil when
// the log still starts at genesis.
func LiveAnchor(ctx context.Context, dir string, trusted ed25519.PublicKey) (*SignedCheckpoint, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 || segs[0].first == 0 {
		return nil, nil
	}
	_, cks, _, err := readCheckpoints(ctx, dir, trusted, false)
	if err != nil {
		return nil, err
	}
	for _, cp := range cks {
		if cp.Segment == segs[0].first {
			return cp, nil
		}
	}
	return nil, &DamageError{Sequence: segs[0].first, Segment: filepath.Base(segs[0].path),
		Err: fmt.Errorf("the log starts at sequence %d and no checkpoint names its first segment", segs[0].first)}
}

// source is a segment to verify: live, or compressed in an archive.
type source struct {
	first uint64
	path  string
	gz    bool
}

// VerifyArchive verifies a log from genesis across its archive and its
// live directory: the archive's segments (dir's manifest or, failing that,
// every *.seg.gz in archiveDir) then the live ones must chain without a
// gap, and every checkpoint in the live checkpoints file must match. A
// segment that was removed (acknowledged by a stream) cannot be verified
// here and is an error naming it.
func VerifyArchive(ctx context.Context, dir, archiveDir string, opt VerifyOptions) (*ScanReport, error) {
	rep, err := verifyArchive(ctx, dir, archiveDir, opt)
	if err != nil {
		return nil, fmt.Errorf("verify receipt log %s with archive %s: %w", dir, archiveDir, err)
	}
	return rep, nil
}

func verifyArchive(ctx context.Context, dir, archiveDir string, opt VerifyOptions) (*ScanReport, error) {
	live, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	for _, a := range m {
		if a.Path == "" {
			return nil, fmt.Errorf("sequences %d..%d were removed from the log (acknowledged by %s): verify them from that stream", a.First, a.Next-1, a.Removed)
		}
	}
	ents, err := os.ReadDir(archiveDir)
	if err != nil {
		return nil, err
	}
	var srcs []source
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, segmentSuffix+archiveSuffix) || strings.HasPrefix(name, ".") {
			continue
		}
		var n uint64
		if _, err := fmt.Sscanf(name, "%020d"+segmentSuffix+archiveSuffix, &n); err != nil || name != ArchiveName(n) {
			return nil, fmt.Errorf("%s: unexpected archive name %q", archiveDir, name)
		}
		if len(live) > 0 && n >= live[0].first {
			continue // also live (a pass cut short): the live copy is verified
		}
		srcs = append(srcs, source{first: n, path: filepath.Join(archiveDir, name), gz: true})
	}
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].first < srcs[j].first })
	for _, s := range live {
		srcs = append(srcs, source{first: s.first, path: s.path})
	}
	_, cks, _, err := readCheckpoints(ctx, dir, opt.Trusted, false)
	if err != nil {
		return nil, err
	}
	c := newChain(opt.Trusted, opt.Workers, opt.Visit)
	pc := newPins(cks, opt)
	c.at = pc.at
	rep := &ScanReport{}
	for k, s := range srcs {
		name := SegmentName(s.first)
		c.seg, c.segFirst = name, s.first
		if c.next != s.first {
			what := "the chain continues at"
			if k == 0 {
				what = "a log starts at"
			}
			return nil, &DamageError{Sequence: c.next, Segment: name, Err: fmt.Errorf("segment starts at sequence %d, but %s %d (a segment is missing from the archive or the log)", s.first, what, c.next)}
		}
		t, err := scanSource(ctx, s, c)
		if err != nil {
			return nil, err
		}
		rep.Segments++
		rep.Size = t.End
		if k < len(srcs)-1 {
			if err := notLastTail(t); err != nil {
				return nil, &DamageError{Sequence: c.next, Segment: name, Offset: t.End, Err: err}
			}
		} else if t.Torn > 0 {
			rep.TornBytes, rep.TornAt, rep.TornSegment = t.Torn, t.End, name
		}
	}
	rep.Records, rep.Head, rep.Steward = c.next, c.head, c.key
	rep.Verified, rep.Last = c.checked, c.last
	if err := pc.finish(rep, opt); err != nil {
		return nil, err
	}
	return rep, nil
}

// scanSource scans one segment, decompressing an archived one, through c.
func scanSource(ctx context.Context, s source, c *chain) (framelog.Tail, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return framelog.Tail{}, err
	}
	defer f.Close()
	var r io.Reader = f
	if s.gz {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return framelog.Tail{}, fmt.Errorf("%s: %w", s.path, err)
		}
		r = zr
	}
	t, err := segFormat.Scan(ctx, r, func(_ uint64, off int64, body []byte) error { return c.add(off, body) })
	if err == nil {
		err = c.flush()
	}
	if err != nil {
		var ce *framelog.CorruptError
		if errors.As(err, &ce) {
			if ferr := c.flush(); ferr != nil {
				return framelog.Tail{}, ferr
			}
			return framelog.Tail{}, &DamageError{Sequence: s.first + ce.Index, Segment: SegmentName(s.first), Offset: ce.Offset, Err: ce.Err}
		}
		return framelog.Tail{}, err
	}
	return t, nil
}

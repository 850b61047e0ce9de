package shunt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"meshd/drivers"
	"meshd/wire"
)

// Policy says whether serves may overlap on one span.
type Policy int

const (
	// Exclusive meters one serve at a time: Open waits until the previous
	// window on the span has closed, so no energy is charged twice. The
	// default.
	Exclusive Policy = iota
	// Shared lets serves overlap. Each instant's energy is split equally
	// among the serves open at that instant (see Span), so the figures of
	// concurrent serves add up to what the span drew; they are ModelBased.
	Shared
)

// SpanConfig tunes a Span.
type SpanConfig struct {
	// Name overrides the span's name on receipts; empty means the single
	// meter's name, or "span(a+b+…)".
	Name   string
	Policy Policy
	// IdleMin is the shortest quiet stretch (no window open) measured as
	// idle power; 0 means one second.
	IdleMin time.Duration
	// IdleSamples is how many recent quiet stretches the idle estimate is
	// the median of; 0 means 9.
	IdleSamples int
	// Now is the span's clock; nil means the first member's. It must agree
	// with the members' clocks.
	Now func() time.Time
	// Inside maps a member's name to the name of another member whose
	// energy contains it (RAPL's package inside the board input's INA226,
	// a GPU rail inside the board): the inner member is a breakdown of the
	// outer one, read over the same windows but never added to the
	// figure, the bound or the evidence (see Breakdown). Members not named
	// here are summed, which is right only for meters on disjoint rails:
	// deciding which meters may nest is the configuration's job.
	Inside map[string]string
	// Logger receives why an idle measurement was refused or left off a
	// reading; nil discards.
	Logger *slog.Logger
}

// Span is the set of meters that together see one backend's energy — an
// INA226 on a board's input plus its RAPL package, a GPU plus its host.
// Its windows open on every member at once: the figure and the bound are
// the members' sums, the provenance the worst of theirs (mesh/1 §8).
//
// Apportioning (Policy Shared): a window W = [t0, t1] is cut at every
// instant another serve on the span opened or closed; over each piece the
// span's energy (integrated pro rata, so pieces add up exactly) is divided
// by the number of serves open during it, and W is charged the sum. The
// serves' charges therefore add up to the span's energy over the union of
// their intervals, never more.
type Span struct {
	name    string
	meters  []Member
	policy  Policy
	idleMin time.Duration
	idleN   int
	guard   time.Duration
	now     func() time.Time

	slot chan struct{} // Exclusive: held from Open to Close

	// inner[i] names the member that member i lies inside, "" when it is
	// summed into the figure.
	inner []string
	log   *slog.Logger

	mu       sync.Mutex
	open     map[*SpanWindow]struct{}
	history  []interval    // closed windows, for apportioning
	quiet    time.Time     // since when no window has been open
	idle     []IdleStretch // recent quiet stretches measured
	idleNext int
	idleID   uint64 // the next stretch's ID
	idleSt   IdleStats
	last     []Breakdown // the inner members' readings of the last window closed
}

// IdleStats counts the span's idle measurements and why some were not
// used.
type IdleStats struct {
	// Measured counts the quiet stretches measured and kept.
	Measured uint64
	// Unsteady counts quiet stretches refused because their power moved
	// more than a quiet board's does (something else ran).
	Unsteady uint64
	// AboveFigure counts readings that left x_idle_uw off because idle
	// power over the window would exceed the window's own energy: the
	// idle figure cannot have been taken on a quiet board.
	AboveFigure uint64
}

// IdleStretch is one quiet stretch the span measured: its reading, with
// the full evidence of a window (so that it can be sealed as an idle
// record, PROFILE §22), and the power it gives, which is what x_idle_uw
// states when this stretch is the one subtracted.
type IdleStretch struct {
	// ID numbers the span's stretches from 0, in the order measured: the
	// same ID is the same stretch.
	ID uint64
	// Oldest is the ID of the oldest stretch the span still kept when
	// this one was handed out: an older one is never subtracted again.
	Oldest uint64
	// From and To are the stretch measured (guards excluded).
	From, To time.Time
	// Reading is the span's reading of [From, To], x_idle_uw absent.
	Reading wire.Reading
	// PowerUW is ⌊Reading.EnergyUJ × 10⁹ ÷ Reading.Metering.WindowNs⌋:
	// the charged figure over the gross window, exactly as a verifier
	// computes it from the sealed record.
	PowerUW uint64
}

// Breakdown is one inner member's reading over a window of its span:
// energy the outer member's figure already contains, shown apart.
type Breakdown struct {
	Meter, Inside string
	Reading       wire.Reading
}

type interval struct{ a, b time.Time }

// Member is what a span needs of each of its meters: a live *Meter, or a
// *Series fed by someone else (a replay, a test).
type Member interface {
	Name() string
	Info() drivers.Info
	Now() time.Time
	Energy(t0, t1 time.Time) (Report, error)
	ProRata(t0, t1 time.Time) (Report, error)
	// WaitPast blocks until a reading surely ending at or after t is
	// recorded, or the member gives up waiting.
	WaitPast(ctx context.Context, t time.Time) error
	Ready(ctx context.Context) error
	Health() error
	Running() bool
}

// NewSpan groups meters into a span. They must share one clock.
func NewSpan(meters []Member, cfg SpanConfig) (*Span, error) {
	if len(meters) == 0 {
		return nil, errors.New("shunt: a span needs at least one meter")
	}
	seen := map[string]bool{}
	var names []string
	guard := time.Duration(0)
	for _, m := range meters {
		if m == nil || reflectNil(m) {
			return nil, errors.New("shunt: nil meter in span")
		}
		if seen[m.Name()] {
			return nil, fmt.Errorf("shunt: meter %s is in the span twice", m.Name())
		}
		seen[m.Name()] = true
		names = append(names, m.Name())
		guard = max(guard, 2*m.Info().MaxPeriod)
	}
	inner := make([]string, len(meters))
	for in, out := range cfg.Inside {
		i, o := slices.Index(names, in), slices.Index(names, out)
		switch {
		case i < 0:
			return nil, fmt.Errorf("shunt: %s is declared inside %s but is not in the span", in, out)
		case o < 0:
			return nil, fmt.Errorf("shunt: %s is declared inside %s, which is not in the span", in, out)
		case i == o:
			return nil, fmt.Errorf("shunt: %s is declared inside itself", in)
		}
		inner[i] = out
	}
	// The outermost member of each chain is the one counted; a cycle has
	// none and would count nothing.
	for i := range meters {
		seen := map[string]bool{}
		for at := names[i]; cfg.Inside[at] != ""; at = cfg.Inside[at] {
			if seen[at] {
				return nil, fmt.Errorf("shunt: the meters declared inside one another form a cycle through %s", at)
			}
			seen[at] = true
		}
	}
	var counted []string
	for i, n := range names {
		if inner[i] == "" {
			counted = append(counted, n)
		}
	}
	name := cfg.Name
	switch {
	case name != "":
	case len(meters) == 1:
		name = meters[0].Name()
	case len(counted) == len(names):
		name = "span(" + strings.Join(names, "+") + ")"
	default:
		// The figure is the counted members' alone; the name says which
		// members were read as their breakdown.
		var in []string
		for i, n := range names {
			if inner[i] != "" {
				in = append(in, n)
			}
		}
		name = "span(" + strings.Join(counted, "+") + "; inside: " + strings.Join(in, "+") + ")"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Span{
		name: name, meters: meters, policy: cfg.Policy,
		idleMin: cfg.IdleMin, idleN: cfg.IdleSamples, guard: guard,
		now:   meters[0].Now,
		slot:  make(chan struct{}, 1),
		open:  map[*SpanWindow]struct{}{},
		inner: inner,
		log:   log.With("span", name),
	}
	if s.idleMin <= 0 {
		s.idleMin = time.Second
	}
	if s.idleN <= 0 {
		s.idleN = 9
	}
	if cfg.Now != nil {
		s.now = cfg.Now
	}
	s.quiet = s.now()
	return s, nil
}

// Name is the span's name on receipts.
func (s *Span) Name() string { return s.name }

// Meters returns the span's members.
func (s *Span) Meters() []Member { return s.meters }

// Health returns nil when every member the figure counts delivers, else
// the first one's complaint; an inner member (a breakdown) failing costs
// only its breakdown.
func (s *Span) Health() error {
	for i, m := range s.meters {
		if s.inner[i] != "" {
			continue
		}
		if err := m.Health(); err != nil {
			return err
		}
	}
	return nil
}

// Ready waits until every member holds a valid reading.
func (s *Span) Ready(ctx context.Context) error {
	for _, m := range s.meters {
		if err := m.Ready(ctx); err != nil {
			return err
		}
	}
	return nil
}

// IdleUW is the median of the recent idle measurements, in µW, and false
// when none was made yet.
func (s *Span) IdleUW() (uint64, bool) {
	st, ok := s.Idle()
	return st.PowerUW, ok
}

// Idle is the quiet stretch whose power is the median of the recent ones
// (the lower of the two middle ones for an even count, so that the figure
// is always one stretch's and can be sealed as that stretch's record),
// and false when none was measured yet.
func (s *Span) Idle() (IdleStretch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleLocked()
}

func (s *Span) idleLocked() (IdleStretch, bool) {
	if len(s.idle) == 0 {
		return IdleStretch{}, false
	}
	v := slices.Clone(s.idle)
	oldest := v[0].ID
	for _, st := range v {
		oldest = min(oldest, st.ID)
	}
	sort.Slice(v, func(i, j int) bool {
		if v[i].PowerUW != v[j].PowerUW {
			return v[i].PowerUW < v[j].PowerUW
		}
		return v[i].ID < v[j].ID
	})
	st := v[(len(v)-1)/2]
	st.Oldest = oldest
	return st, true
}

// SpanWindow is one open window on a span.
type SpanWindow struct {
	s      *Span
	t0     time.Time
	end    time.Time // set under s.mu when the window closes
	mu     sync.Mutex
	closed bool
	idle   *IdleStretch // the stretch x_idle_uw was taken from, set by Close
}

// Span is the span the window is open on.
func (w *SpanWindow) Span() *Span { return w.s }

// IdleStretch is the quiet stretch whose power the closed window's
// reading states as x_idle_uw, and false when it states none.
func (w *SpanWindow) IdleStretch() (IdleStretch, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle == nil {
		return IdleStretch{}, false
	}
	return *w.idle, true
}

// Open starts a window now. Under Exclusive it first waits for the span
// to be free (ctx ends the wait); the wait is not metered.
func (s *Span) Open(ctx context.Context) (*SpanWindow, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("span %s: opening window: %w", s.name, err)
	}
	for i, m := range s.meters {
		if !m.Running() && s.inner[i] == "" {
			return nil, fmt.Errorf("span %s: opening window: meter %s is not sampling", s.name, m.Name())
		}
	}
	if s.policy == Exclusive {
		select {
		case s.slot <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("span %s: waiting for the span: %w", s.name, ctx.Err())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.open) == 0 {
		s.measureIdleLocked(now)
	}
	w := &SpanWindow{s: s, t0: now}
	s.open[w] = struct{}{}
	return w, nil
}

// idlePieces is how many equal pieces a quiet stretch is cut into to check
// that it was quiet, and idleSpread how far (relative to the lowest
// piece, beyond the pieces' own bounds) their mean powers may differ.
const (
	idlePieces = 8
	idleSpread = 0.25
)

// measureIdleLocked records the mean power of the quiet stretch that ends
// now, kept clear of the windows around it by a guard of two periods. No
// window of this span was open, but something else may have run (a
// background job, another process on the board): a stretch whose pieces'
// mean powers differ by more than their bounds plus a quarter of the
// lowest is refused as not quiet, and so is one whose bound exceeds a
// quarter of its energy (invalid readings, gaps); both are counted.
func (s *Span) measureIdleLocked(now time.Time) {
	a, b := s.quiet.Add(s.guard), now.Add(-s.guard)
	if b.Sub(a) < s.idleMin {
		return
	}
	n := idlePieces
	if piece := b.Sub(a) / time.Duration(n); piece < 2*s.guard {
		n = int(b.Sub(a) / (2 * s.guard))
	}
	n = max(n, 1)
	var uj, boundUJ float64
	lo, hi := math.Inf(1), math.Inf(-1)
	var loB, hiB float64
	for k := range n {
		pa := a.Add(b.Sub(a) * time.Duration(k) / time.Duration(n))
		pb := a.Add(b.Sub(a) * time.Duration(k+1) / time.Duration(n))
		var e, bound float64
		for i, m := range s.meters {
			if s.inner[i] != "" {
				continue
			}
			rep, err := m.ProRata(pa, pb)
			if err != nil || rep.Coverage.Samples == 0 {
				return
			}
			e += rep.EnergyUJ
			bound += rep.BoundUJ
		}
		uj += e
		boundUJ += bound
		sec := pb.Sub(pa).Seconds()
		if p := e / sec; p < lo {
			lo, loB = p, bound/sec
		}
		if p := e / sec; p > hi {
			hi, hiB = p, bound/sec
		}
	}
	if n > 1 && hi-lo > loB+hiB+idleSpread*max(lo, 0) {
		s.idleSt.Unsteady++
		s.log.Warn("idle measurement refused: the quiet stretch was not quiet (something else drew power)",
			"from", a, "to", b, "lowest_uw", math.Round(lo), "highest_uw", math.Round(hi))
		return
	}
	if boundUJ > idleSpread*uj {
		// Invalid readings or gaps left the stretch's power unknown within
		// a quarter: no figure to subtract from anyone's serve.
		s.idleSt.Unsteady++
		s.log.Warn("idle measurement refused: the quiet stretch was not measured well enough",
			"from", a, "to", b, "energy_uj", math.Round(uj), "bound_uj", math.Round(boundUJ))
		return
	}
	// The stretch's own reading, over whole conversions like a window's,
	// is what an idle record of it seals and what its power comes from.
	reps := make([]Report, len(s.meters))
	for i, m := range s.meters {
		if s.inner[i] != "" {
			continue
		}
		rep, err := m.Energy(a, b)
		if err != nil {
			s.idleSt.Unsteady++
			s.log.Warn("idle measurement refused: the quiet stretch has no reading", "from", a, "to", b, "err", err)
			return
		}
		reps[i] = rep
	}
	rd := s.combine(reps, b.Sub(a), 1)
	if rd.Metering.WindowNs == 0 || rd.Provenance == wire.Estimator {
		s.idleSt.Unsteady++
		return
	}
	ph, pl := bits.Mul64(rd.EnergyUJ, 1_000_000_000)
	if ph >= rd.Metering.WindowNs {
		s.idleSt.Unsteady++
		return
	}
	p, _ := bits.Div64(ph, pl, rd.Metering.WindowNs)
	s.idleSt.Measured++
	st := IdleStretch{ID: s.idleID, From: a, To: b, Reading: rd, PowerUW: p}
	s.idleID++
	if len(s.idle) < s.idleN {
		s.idle = append(s.idle, st)
		return
	}
	s.idle[s.idleNext] = st
	s.idleNext = (s.idleNext + 1) % s.idleN
}

// Close ends the window now, waits for every member's closing reading and
// returns the span's reading. It returns wire.ErrNoMeasurement (wrapped)
// when any member saw nothing of the window: a span is only as good as its
// worst meter.
func (w *SpanWindow) Close(ctx context.Context) (wire.Reading, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return wire.Reading{}, fmt.Errorf("span %s: window already closed", w.s.name)
	}
	w.closed = true
	s := w.s
	s.mu.Lock()
	t1 := s.now()
	w.end = t1
	s.mu.Unlock()
	defer s.release(w, t1)
	var waitErr error
	for _, m := range s.meters {
		if err := m.WaitPast(ctx, t1); err != nil {
			waitErr = err
		}
	}
	if waitErr != nil {
		return wire.Reading{}, waitErr
	}
	if s.policy == Shared {
		return s.apportion(w, t1)
	}
	reps := make([]Report, len(s.meters))
	errs := make([]error, len(s.meters))
	for i, m := range s.meters {
		rep, err := m.Energy(w.t0, t1)
		if err != nil && s.inner[i] == "" {
			return wire.Reading{}, fmt.Errorf("span %s: %w", s.name, err)
		}
		reps[i], errs[i] = rep, err
	}
	s.keepBreakdown(reps, errs)
	rd := s.combine(reps, t1.Sub(w.t0), 1)
	w.idle = s.attachIdle(&rd)
	return rd, nil
}

// keepBreakdown records the inner members' readings of the window just
// closed; a member that measured nothing of it is left out.
func (s *Span) keepBreakdown(reps []Report, errs []error) {
	var out []Breakdown
	for i, m := range s.meters {
		if s.inner[i] != "" && errs[i] == nil {
			out = append(out, Breakdown{Meter: m.Name(), Inside: s.inner[i], Reading: reps[i].Reading})
		}
	}
	s.mu.Lock()
	s.last = out
	s.mu.Unlock()
}

// Breakdown returns the inner members' readings of the last window closed
// on the span: energy already inside the outer members' figure, for
// display. Nil when the span has no inner member or no window closed yet.
func (s *Span) Breakdown() []Breakdown {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.last)
}

// IdleStats returns the span's idle-measurement counters.
func (s *Span) IdleStats() IdleStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleSt
}

func (s *Span) release(w *SpanWindow, t1 time.Time) {
	s.mu.Lock()
	delete(s.open, w)
	if s.policy == Shared {
		s.history = append(s.history, interval{w.t0, t1})
		oldest := t1
		for o := range s.open {
			if o.t0.Before(oldest) {
				oldest = o.t0
			}
		}
		n := 0
		for _, h := range s.history {
			if h.b.After(oldest) {
				s.history[n] = h
				n++
			}
		}
		s.history = s.history[:n]
	}
	if len(s.open) == 0 {
		s.quiet = s.now()
	}
	s.mu.Unlock()
	if s.policy == Exclusive {
		<-s.slot
	}
}

// apportion charges w's [t0, t1] its share of the span's energy under the
// Shared rule.
func (s *Span) apportion(w *SpanWindow, t1 time.Time) (wire.Reading, error) {
	t0 := w.t0
	s.mu.Lock()
	var others []interval
	for o := range s.open {
		if o == w || !o.t0.Before(t1) {
			continue
		}
		end := t1
		if !o.end.IsZero() && o.end.Before(t1) {
			end = o.end
		}
		if end.After(t0) {
			others = append(others, interval{o.t0, end})
		}
	}
	for _, h := range s.history {
		if h.a.Before(t1) && h.b.After(t0) {
			others = append(others, h)
		}
	}
	s.mu.Unlock()
	cuts := []time.Time{t0, t1}
	for _, o := range others {
		for _, c := range []time.Time{o.a, o.b} {
			if c.After(t0) && c.Before(t1) {
				cuts = append(cuts, c)
			}
		}
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i].Before(cuts[j]) })
	reps := make([]Report, len(s.meters))
	errs := make([]error, len(s.meters))
	for i, m := range s.meters {
		rep, err := m.ProRata(t0, t1)
		if err != nil && s.inner[i] == "" {
			return wire.Reading{}, fmt.Errorf("span %s: %w", s.name, err)
		}
		reps[i], errs[i] = rep, err
	}
	shared := 1
	energy := make([]float64, len(s.meters))
	bound := make([]float64, len(s.meters))
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		if !b.After(a) {
			continue
		}
		// The serves open over the whole piece: this one and every other
		// whose interval contains the piece.
		n := 1
		for _, o := range others {
			if !o.a.After(a) && !o.b.Before(b) {
				n++
			}
		}
		shared = max(shared, n)
		for j, m := range s.meters {
			if errs[j] != nil {
				continue
			}
			rep, err := m.ProRata(a, b)
			if err != nil {
				if s.inner[j] != "" {
					errs[j] = err
					continue
				}
				return wire.Reading{}, fmt.Errorf("span %s: %w", s.name, err)
			}
			energy[j] += rep.EnergyUJ / float64(n)
			bound[j] += rep.BoundUJ / float64(n)
		}
	}
	for j := range reps {
		reps[j].EnergyUJ, reps[j].BoundUJ = energy[j], bound[j]
		e := math.Max(math.Round(energy[j]), 0)
		reps[j].Reading.EnergyUJ = uint64(e)
		reps[j].Reading.Metering.ErrorUJ = uint64(math.Ceil(bound[j] + math.Abs(e-energy[j])))
		reps[j].Reading.Provenance = wire.ModelBased
	}
	s.keepBreakdown(reps, errs)
	rd := s.combine(reps, t1.Sub(t0), shared)
	w.idle = s.attachIdle(&rd)
	return rd, nil
}

// kindRank orders meter kinds from strongest to weakest evidence.
func kindRank(k string) int {
	switch k {
	case wire.KindADC:
		return 0
	case wire.KindCounter:
		return 1
	case wire.KindModel:
		return 2
	case wire.KindPoint:
		return 3
	}
	return 4
}

// combine sums the members' reports into the span's reading.
func (s *Span) combine(reps []Report, serve time.Duration, shared int) wire.Reading {
	out := wire.Reading{Provenance: wire.HwShunt}
	m := wire.Metering{Meter: s.name, Kind: wire.KindADC, CoveredPPM: wire.FullPPM, Shared: uint64(shared),
		ServeNs: uint64(max(serve, 0))}
	var start, end time.Time
	first := true
	for i, rep := range reps {
		if s.inner[i] != "" {
			continue // a breakdown: its energy is inside another member's
		}
		r := rep.Reading
		out.EnergyUJ += r.EnergyUJ
		if r.Provenance == wire.ModelBased {
			out.Provenance = wire.ModelBased
		}
		if kindRank(r.Metering.Kind) > kindRank(m.Kind) {
			m.Kind = r.Metering.Kind
		}
		m.ErrorUJ += r.Metering.ErrorUJ
		m.Samples += r.Metering.Samples
		m.MaxGapNs = max(m.MaxGapNs, r.Metering.MaxGapNs)
		m.CoveredPPM = min(m.CoveredPPM, r.Metering.CoveredPPM)
		m.PeriodNs = max(m.PeriodNs, r.Metering.PeriodNs)
		m.AccuracyPPM = max(m.AccuracyPPM, r.Metering.AccuracyPPM)
		// The span's full scale is its members' sum, stated only when
		// every member states its own.
		if first || m.FullScaleUW != 0 {
			m.FullScaleUW = addFullScale(m.FullScaleUW, r.Metering.FullScaleUW)
		}
		if first || rep.Start.Before(start) {
			start = rep.Start
		}
		if first || rep.End.After(end) {
			end = rep.End
		}
		first = false
		if b := r.Metering.BusBand; b != nil {
			if m.BusBand == nil {
				m.BusBand = &wire.BusBand{LoMV: b.LoMV, HiMV: b.HiMV}
			} else {
				m.BusBand.LoMV, m.BusBand.HiMV = min(m.BusBand.LoMV, b.LoMV), max(m.BusBand.HiMV, b.HiMV)
			}
		}
	}
	m.WindowNs = uint64(max(end.Sub(start), 0))
	m.ServeNs = min(m.ServeNs, m.WindowNs)
	m.StatUJ = combineStat(reps, s.inner, shared)
	if shared > 1 {
		out.Provenance = wire.ModelBased
	}
	if out.Provenance == wire.HwShunt {
		// The members each met their declared accuracy; their sum must
		// meet the span's as one figure, rounding included.
		if !wire.WithinAccuracy(m.ErrorUJ, out.EnergyUJ, m.AccuracyPPM) {
			out.Provenance = wire.ModelBased
		}
	}
	out.Metering = m
	return out
}

// attachIdle sets rd's x_idle_uw to the median quiet stretch's power and
// returns that stretch, or nil when there is none or it is left off.
func (s *Span) attachIdle(rd *wire.Reading) *IdleStretch {
	st, ok := s.Idle()
	if !ok {
		return nil
	}
	if !idleWithin(st.PowerUW, rd.Metering.WindowNs, rd.EnergyUJ) {
		// Idle power over the window exceeds what the window drew: the
		// idle figure was not taken on a quiet board, and sealing it
		// would make the net energy negative.
		s.mu.Lock()
		s.idleSt.AboveFigure++
		s.mu.Unlock()
		s.log.Warn("idle power left off the reading: idle over the window exceeds the window's energy",
			"idle_uw", st.PowerUW, "window_ns", rd.Metering.WindowNs, "energy_uj", rd.EnergyUJ)
		return nil
	}
	idle := st.PowerUW
	rd.Metering.IdleUW = &idle
	return &st
}

// idleWithin reports whether idleUW × windowNs / 10⁹ ≤ energyUJ, exactly
// (128-bit products), so that net energy = figure − idle × window is never
// negative.
func idleWithin(idleUW, windowNs, energyUJ uint64) bool {
	ih, il := bits.Mul64(idleUW, windowNs)
	eh, el := bits.Mul64(energyUJ, 1_000_000_000)
	return ih < eh || (ih == eh && il <= el)
}

// combineStat is a span's statistical uncertainty: the root sum of squares
// of the members its figure adds (independent samplers), present only when every such member
// states one and the figure is not apportioned, since it is never
// completed from a bound.
func combineStat(reps []Report, inner []string, shared int) *uint64 {
	if shared > 1 || len(reps) == 0 {
		return nil
	}
	var sq float64
	for i, rep := range reps {
		if inner[i] != "" {
			continue // a breakdown, not in the figure
		}
		if rep.Reading.Metering.StatUJ == nil {
			return nil
		}
		sq += rep.StatUJ * rep.StatUJ
	}
	v := uint64(math.Ceil(math.Sqrt(sq)))
	return &v
}

func reflectNil(m Member) bool {
	switch v := m.(type) {
	case *Meter:
		return v == nil
	case *Series:
		return v == nil
	}
	return false
}

// addFullScale sums two full scales, 0 (unstated) absorbing, saturating
// rather than wrapping.
func addFullScale(a, b uint64) uint64 {
	if b == 0 {
		return 0
	}
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"meshd/engine"
	"meshd/steward"
	"meshd/steward/grant"
	"meshd/wire"
)

// EstimatorMeter is the x_meter name of a figure that no hardware produced.
const EstimatorMeter = "estimator"

// Agent runs serves end to end: authorise, route, meter, seal.
type Agent struct {
	table        atomic.Pointer[table] // what Reconfigure swaps
	steward      Sealer
	clock        func() time.Time
	mustHave     bool
	requireMeter bool // refuse to serve while the meter is unhealthy
	costs        *costs
	log          *slog.Logger
	observe      func(Event)
	runs         runs      // the open runs (runs.go)
	spanIdle     spanIdles // idle records sealed for spans' quiet stretches (spanidle.go)
	boardRoot    string
}

// table is the part of an Agent a reload replaces as a whole, so a serve
// sees either the old or the new configuration, never half of each.
type table struct {
	backends []engine.Backend
	pinned   map[string]engine.Backend // reachable only by name
	meters   map[string]Meter          // by backend name
	meter    Meter                     // for backends not in meters; nil: Estimator
	grants   Authoriser                // nil refuses any grant
	// maxCeilingUJ is the largest joule_ceiling_uj served; 0 is no cap.
	maxCeilingUJ uint64
}

// meterFor is the meter that wraps backend b's engine calls, nil for none.
func (t *table) meterFor(b string) Meter {
	if m, ok := t.meters[b]; ok {
		return m
	}
	return t.meter
}

// Sealer seals a finished serve into the receipt chain; *steward.Steward
// is the production one. The agent needs nothing else of the steward, so
// its tests need no log on disk.
type Sealer interface {
	Seal(ctx context.Context, d steward.Draft) (*steward.Sealed, error)
	// Public is the key receipts are signed with: grants must name it.
	Public() ed25519.PublicKey
}

// Authoriser runs phase 1 of a granted serve; *grant.Authoriser is the
// production one.
type Authoriser interface {
	Authorise(ctx context.Context, env []byte, request wire.ContentID, ceilingUJ uint64) (*grant.Hold, error)
	// Steward is the steward the grants it honours must be addressed to.
	Steward() ed25519.PublicKey
}

// Config assembles an Agent.
type Config struct {
	// Backends in registration order, which breaks routing ties.
	Backends []engine.Backend
	// Meter wraps each engine call of a backend not in Meters; nil means
	// Estimator provenance.
	Meter Meter
	// Meters are per-backend meters (the span of the rails that backend
	// draws from), by backend name.
	Meters map[string]Meter
	// Pinned backends are served only when a serve names them.
	Pinned  []engine.Backend
	Steward Sealer
	// Clock measures window lengths for estimator figures; nil = time.Now.
	Clock func() time.Time
	// Grants authorises granted serves (phase 1); nil refuses any grant.
	Grants Authoriser
	// RequireGrant refuses every serve that carries no grant.
	RequireGrant bool
	// RequireMeter is the refuse-when-unmetered policy: while the meter
	// reports itself unhealthy (a stalled or dead sensor) the agent
	// refuses serves rather than seal Estimator receipts. It needs a Meter.
	RequireMeter bool
	// Logger receives what the agent decides on its own (a figure claimed
	// less than the meter offered); nil discards.
	Logger *slog.Logger
	// Observe, when set, is told of every serve's end (sealed, refused or
	// failed), synchronously, for metrics; it must not block.
	Observe func(Event)
	// RunTimeout closes a run with no request for this long as abandoned
	// (CloseAbandoned, by Clock); 0 is DefaultRunTimeout.
	RunTimeout time.Duration
	// BoardRoot is the file-system root the machine state sealed at a
	// run's open and close is read under (board.ReadState); "" is "/".
	BoardRoot string
	// MaxCeilingUJ is Routes.MaxCeilingUJ.
	MaxCeilingUJ uint64
}

// Routes is what Reconfigure replaces: the backends, their meters and the
// grant authoriser.
type Routes struct {
	Backends []engine.Backend
	// Pinned backends are never routed to by cost: a serve reaches one
	// only by naming it (Options.Backend), as a corpus answer names the
	// corpus it queries.
	Pinned []engine.Backend
	Meter  Meter
	Meters map[string]Meter
	Grants Authoriser
	// MaxCeilingUJ refuses, before any work, a serve whose
	// joule_ceiling_uj is larger (LimitError); 0 is no cap.
	MaxCeilingUJ uint64
}

// ErrUnmetered is wrapped when a serve is refused because the meter is not
// measuring and the agent requires it to be.
var ErrUnmetered = errors.New("meter unhealthy")

// ErrGrantRequired is wrapped when a serve without a grant reaches an agent
// that requires one, or a grant reaches an agent with no authoriser.
var ErrGrantRequired = errors.New("grant required")

// New checks cfg and returns an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Steward == nil {
		return nil, errors.New("agent: a steward is required")
	}
	a := &Agent{steward: cfg.Steward, clock: cfg.Clock, mustHave: cfg.RequireGrant, requireMeter: cfg.RequireMeter,
		costs: newCosts(), log: cfg.Logger, observe: cfg.Observe, boardRoot: cfg.BoardRoot}
	if a.boardRoot == "" {
		a.boardRoot = "/"
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.clock == nil {
		a.clock = time.Now
	}
	if a.observe == nil {
		a.observe = func(Event) {}
	}
	a.runs.init(cfg.RunTimeout)
	if err := a.Reconfigure(Routes{Backends: cfg.Backends, Pinned: cfg.Pinned, Meter: cfg.Meter, Meters: cfg.Meters, Grants: cfg.Grants,
		MaxCeilingUJ: cfg.MaxCeilingUJ}); err != nil {
		return nil, err
	}
	return a, nil
}

// Reconfigure checks r and makes it the agent's routing table: serves
// already routed finish on the backends they chose, later serves see only
// r. What the agent has learned of each backend's cost is kept by name.
func (a *Agent) Reconfigure(r Routes) error {
	seen := map[string]bool{}
	pinned := map[string]engine.Backend{}
	for i, b := range append(append([]engine.Backend{}, r.Backends...), r.Pinned...) {
		if seen[b.Name()] {
			return fmt.Errorf("agent: backend name %q registered twice", b.Name())
		}
		seen[b.Name()] = true
		if i >= len(r.Backends) {
			pinned[b.Name()] = b
		}
	}
	for name := range r.Meters {
		if !seen[name] {
			return fmt.Errorf("agent: a meter is given for backend %q, which is not registered", name)
		}
	}
	if a.requireMeter && r.Meter == nil && len(r.Meters) == 0 {
		return errors.New("agent: RequireMeter needs a meter")
	}
	if a.mustHave && r.Grants == nil {
		return errors.New("agent: RequireGrant needs a grant authoriser")
	}
	// An authoriser for another steward id would honour grants addressed
	// elsewhere, spending at this steward budget meant for that one.
	if r.Grants != nil && !r.Grants.Steward().Equal(a.steward.Public()) {
		return fmt.Errorf("agent: the grant authoriser is for steward %x, this agent seals as %s",
			[]byte(r.Grants.Steward()), hex.EncodeToString(a.steward.Public()))
	}
	a.table.Store(&table{backends: r.Backends, pinned: pinned, meters: r.Meters, meter: r.Meter, grants: r.Grants, maxCeilingUJ: r.MaxCeilingUJ})
	return nil
}

// BackendInfo is what the agent knows of one backend: what it advertises
// and what it has learned from its receipts.
type BackendInfo struct {
	Backend engine.Backend
	// CostUJ is the µJ/token the router uses now, and CostSource says
	// whether it was configured or learned (and from how many receipts).
	CostUJ     uint64
	CostSource string
	Learned    bool
	// Meter is the meter of the backend's span; nil when it has none.
	Meter Meter
}

// Backends describes the current backends in registration order.
func (a *Agent) Backends() []BackendInfo {
	t := a.table.Load()
	out := make([]BackendInfo, len(t.backends))
	for i, b := range t.backends {
		c, src := a.costs.cost(b.Name(), b.UJPerToken())
		out[i] = BackendInfo{Backend: b, CostUJ: c, CostSource: src, Learned: a.costs.learned(b.Name()), Meter: t.meterFor(b.Name())}
	}
	return out
}

// Response is a completed serve.
type Response struct {
	RequestID wire.ContentID
	Decision  Decision
	Sealed    *steward.Sealed
	Output    []byte
	// Stopped says the engine ended the output on one of the serve's stop
	// strings (engine.Options.Stop).
	Stopped bool
	// IdleRecord is the idle record of the quiet stretch the serve's
	// x_idle_uw subtracts, when this serve sealed it (the first to use
	// that stretch); nil otherwise.
	IdleRecord *SealedRecord
}

// ServeError is a serve that failed after routing; it keeps the decision
// so the caller can see which backend failed and why it was chosen.
type ServeError struct {
	Decision Decision
	Err      error
}

func (e *ServeError) Error() string { return e.Err.Error() }
func (e *ServeError) Unwrap() error { return e.Err }

// Serve runs one ungranted request through the four phases of §2. The
// prompt travels beside the request and never enters the receipt. A failure
// at any phase seals nothing.
func (a *Agent) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (*Response, error) {
	return a.ServeWith(ctx, req, prompt, Options{})
}

// ServeGranted is Serve riding on a grant envelope (nil for none).
func (a *Agent) ServeGranted(ctx context.Context, req wire.ServeRequest, prompt []byte, grantEnv []byte) (*Response, error) {
	return a.ServeWith(ctx, req, prompt, Options{Grant: grantEnv})
}

// Options are what a caller may add to a serve.
type Options struct {
	// Grant is a grant envelope the serve rides on; nil for none.
	Grant []byte
	// Engine asks the backend to stream its output or render chat
	// messages; a backend that cannot is a failed serve, never a silent
	// plain one.
	Engine engine.Options
	// Backend, when set, is the only backend weighed: a routed or pinned
	// backend by name. The floor and ceiling still apply.
	Backend string
	// Run, when set, names the open run the serve belongs to (its
	// run-open record's sequence): the receipt carries x_run and the run
	// counts it. A run that is not open refuses the serve before any work.
	Run *uint64
	// TimeFirstToken asks for x_first_token_ns on a serve whose caller
	// takes the output whole: the engine then produces its output piece
	// by piece as for a streamed serve (a child engine streams, about
	// 0.1 ms a serve), so the daemon times the first piece itself.
	TimeFirstToken bool
	// Chosen, when set, is told the backend's name once routing has
	// chosen it and before the engine runs (again for a fallback, which
	// happens only before any output), so a streamed answer can name the
	// model on its first piece.
	Chosen func(backend string)
}

// ErrNoBackend is wrapped when a serve names a backend that is not
// registered.
var ErrNoBackend = errors.New("no such backend")

// Event is one serve's end, as told to Config.Observe.
type Event struct {
	// Backend is the chosen backend, "" when the serve ended before routing
	// chose one.
	Backend string
	// Sealed is the receipt, nil unless the serve was sealed.
	Sealed *steward.Sealed
	// Reason classifies a serve that sealed nothing: "bad_request",
	// "unmetered", "grant", "no_route", "engine", "cancelled", "seal",
	// "run" (the run it names is not open).
	Reason string
	// Err is why the serve sealed nothing, nil when it was sealed.
	Err error
	// Degraded: the backend has a meter, but the receipt claims Estimator.
	Degraded bool
	// Tokens in, out and accepted of a sealed serve.
	TokensIn, TokensOut, TokensAccepted uint32
	// Phases is where a sealed serve's time went, on the wall clock.
	Phases Phases
}

// Phases is a sealed serve's time by phase (wall clock, whatever the
// agent's Clock), for the daemon-cost benchmark and metrics: the checks
// before any work, the grant's verification and hold, routing, the engine
// call (its slot, the meter window, the hop to the engine and the
// engine's own time), sealing (signing, the append and its fsync), and
// settling the hold.
type Phases struct {
	Admit, Grant, Route, Engine, Seal, Settle time.Duration
}

// ServeWith is Serve with options. Phase 1 verifies a grant, if any, and
// holds the request's joule ceiling on its budget before routing or any
// engine work; the hold is settled at the sealed receipt's charge, or
// released if the serve fails. If the ledger refuses the settlement the
// response is returned together with the error: the receipt is durable and
// the ledger settles from it when next opened. A serve whose context ends
// before it is sealed (the caller went away) seals nothing: no receipt
// claims tokens its caller never received.
func (a *Agent) ServeWith(ctx context.Context, req wire.ServeRequest, prompt []byte, opts Options) (resp *Response, err error) {
	ev := Event{}
	mark := time.Now()
	lap := func(d *time.Duration) {
		now := time.Now()
		*d, mark = now.Sub(mark), now
	}
	defer func() {
		if err != nil && resp == nil {
			ev.Err = err
			if ev.Reason == "" {
				ev.Reason = "engine"
			}
			if ctx.Err() != nil {
				ev.Reason = "cancelled"
			}
		}
		a.observe(ev)
	}()
	id, err := req.ID()
	if err != nil {
		ev.Reason = "bad_request"
		return nil, fmt.Errorf("serve: %w", err)
	}
	if got := wire.ContentOf(prompt); got != req.PromptHash {
		ev.Reason = "bad_request"
		return nil, fmt.Errorf("serve: %w: prompt_hash %s does not address the prompt sent (%s)", wire.ErrBadRequest, req.PromptHash, got)
	}
	// Work that could not be sealed is not started: while the storage
	// refuses writes (a full disk) the serve is refused as such, and the
	// check heals the log once writes succeed again.
	if sc, ok := a.steward.(interface{ Storage() error }); ok {
		if err := sc.Storage(); err != nil {
			ev.Reason = "storage"
			return nil, fmt.Errorf("serve %s: %w", id, err)
		}
	}
	if opts.Run != nil {
		leave, err := a.enterRun(*opts.Run)
		if err != nil {
			ev.Reason = "run"
			return nil, fmt.Errorf("serve %s: %w", id, err)
		}
		defer func() {
			var seq *uint64
			if resp != nil {
				seq = &resp.Sealed.Receipt.Sequence
			}
			leave(seq, false)
		}()
	}
	t := a.table.Load()
	candidates := t.backends
	if opts.Backend != "" {
		b, ok := t.pinned[opts.Backend]
		for _, rb := range t.backends {
			if rb.Name() == opts.Backend {
				b, ok = rb, true
			}
		}
		if !ok {
			ev.Reason = "bad_request"
			return nil, fmt.Errorf("serve %s: %w: %q", id, ErrNoBackend, opts.Backend)
		}
		candidates = []engine.Backend{b}
	}
	// An embedding serve goes only to embedding backends, and no other
	// serve does: neither can answer the other.
	if candidates, err = byCapability(candidates, opts.Engine.Embed); err != nil {
		ev.Reason = "bad_request"
		return nil, fmt.Errorf("serve %s: %w", id, err)
	}
	// Bounded work: a request over a cap is refused here, before the
	// grant's hold, routing or any engine work.
	if candidates, err = admitLimits(req, candidates, t.maxCeilingUJ); err != nil {
		ev.Reason = "bad_request"
		return nil, fmt.Errorf("serve %s: %w", id, err)
	}
	lap(&ev.Phases.Admit)
	var hold *grant.Hold
	switch {
	case opts.Grant == nil && a.mustHave:
		ev.Reason = "grant"
		return nil, fmt.Errorf("serve %s: %w: this agent serves only granted requests", id, ErrGrantRequired)
	case opts.Grant != nil && t.grants == nil:
		ev.Reason = "grant"
		return nil, fmt.Errorf("serve %s: %w: a grant was presented but no trusted issuers are configured", id, ErrGrantRequired)
	case opts.Grant != nil:
		if hold, err = t.grants.Authorise(ctx, opts.Grant, id, req.JouleCeilingUJ); err != nil {
			ev.Reason = "grant"
			if errors.Is(err, steward.ErrStorage) {
				ev.Reason = "storage"
			}
			return nil, fmt.Errorf("serve %s: %w", id, err)
		}
		defer func() {
			if resp == nil {
				if rerr := hold.Release(); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
		}()
	}
	lap(&ev.Phases.Grant)
	dec, err := route(req, candidates, func(b engine.Backend) (uint64, string) { return a.costs.cost(b.Name(), b.UJPerToken()) })
	if err != nil {
		ev.Reason = "no_route"
		if !errors.Is(err, ErrNoRoute) {
			ev.Reason = "bad_request"
		}
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s: %w", id, err)}
	}
	lap(&ev.Phases.Route)
	var (
		b          engine.Backend
		meter      Meter
		res        engine.Result
		energy     wire.Energy
		metering   wire.Metering
		idle       spanIdle
		firstToken *uint64
	)
	for {
		b = candidates[dec.Chosen]
		ev.Backend = b.Name()
		meter = t.meterFor(b.Name())
		if a.requireMeter && meter != nil {
			if hc, ok := meter.(HealthChecker); ok {
				if err := hc.Health(); err != nil {
					ev.Reason = "unmetered"
					return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s on %s: %w: %v", id, b.Name(), ErrUnmetered, err)}
				}
			}
		}
		if opts.Chosen != nil {
			opts.Chosen(b.Name())
		}
		eopts := opts.Engine
		eopts.Grant = opts.Grant
		// A caller that does not stream takes the output whole: the
		// engine may answer whole rather than pay for pieces only timed,
		// unless the caller asked for the first token to be timed.
		eopts.Whole = eopts.Emit == nil && !opts.TimeFirstToken
		emitted := false
		if emit := eopts.Emit; emit != nil {
			eopts.Emit = func(p []byte) error { emitted = true; return emit(p) }
		}
		res, energy, metering, firstToken, err = a.metered(ctx, b, meter, req, prompt, eopts, &idle)
		if err == nil {
			break
		}
		// Fall back to the next cheapest admissible backend only when this
		// one failed as a backend (it now reports itself unhealthy, as a
		// node that did not answer does), the caller has seen none of its
		// output and is still there. The receipt then lists it as failed.
		if emitted || ctx.Err() != nil || !reportsUnhealthy(b) || !dec.fallBack(err, req.JouleCeilingUJ) {
			return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s on %s: %w", id, b.Name(), err)}
		}
		a.log.Warn("backend failed; falling back to the next cheapest admissible", "failed", b.Name(),
			"next", dec.Candidates[dec.Chosen].Backend, "err", err)
	}
	lap(&ev.Phases.Engine)
	if err := ctx.Err(); err != nil {
		// The engine finished but the caller is gone: it will never read
		// these tokens, so no receipt may claim them.
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s on %s: caller gone before sealing: %w", id, b.Name(), err)}
	}
	recipe := b.Recipe()
	var upstream *steward.Upstream
	if res.Upstream != nil {
		if res.Upstream.Recipe != "" {
			recipe = res.Upstream.Recipe
		}
		upstream = &steward.Upstream{Receipt: res.Upstream.Receipt, Steward: res.Upstream.Steward}
	}
	draft := steward.Draft{
		Upstream: upstream,
		Request:  id,
		Backend:  b.Name(),
		Recipe:   recipe,
		Route:    dec.Justification,
		Outcome:  res.Outcome,
		Floor:    req.FidelityFloor,
		Served:   b.Fidelity(),
		Energy:   energy,
		Metering: metering,
		// The route as taken: every backend weighed, with the estimate the
		// router used, and any tried and failed before this one served.
		Candidates: dec.receipt(),
		CeilingUJ:  req.JouleCeilingUJ,
		Run:        opts.Run,
		// The serve's interval is the meter's (x_serve_ns), the first
		// piece's time the agent's clock: never past the serve's end.
		FirstTokenNs: clampFirstToken(firstToken, metering.ServeNs, res),
	}
	if hold != nil {
		// The grant is debited the charged figure, capped at the hold the
		// caller authorised: a serve that cost more than its ceiling never
		// overdraws the budget, and its receipt shows the overrun.
		g, h, debit := hold.Grant, hold.ID, min(energy.UJ(), req.JouleCeilingUJ)
		draft.Grant, draft.GrantHold, draft.GrantDebit = &g, &h, &debit
	}
	idleRec := a.idleRecord(context.WithoutCancel(ctx), &draft, idle)
	sealed, err := a.seal(context.WithoutCancel(ctx), draft, res, b)
	if err != nil {
		ev.Reason = "seal"
		if errors.Is(err, steward.ErrStorage) {
			ev.Reason = "storage"
		}
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s: %w", id, err)}
	}
	lap(&ev.Phases.Seal)
	ev.Sealed = sealed
	ev.TokensIn, ev.TokensOut, ev.TokensAccepted = res.Outcome.TokensIn, res.Outcome.TokensOut, res.Outcome.TokensAccepted
	e, eerr := sealed.Receipt.Energy()
	if eerr == nil {
		a.costs.observe(b.Name(), e.Provenance(), e.UJ(), uint64(res.Outcome.TokensIn)+uint64(res.Outcome.TokensOut))
		ev.Degraded = meter != nil && e.Provenance() == wire.Estimator
	}
	resp = &Response{RequestID: id, Decision: dec, Sealed: sealed, Output: res.Output, Stopped: res.Stopped, IdleRecord: idleRec}
	if hold != nil {
		// The receipt is the truth the ledger recovers from, so settle at
		// exactly the debit it states.
		if err := hold.Settle(*sealed.Receipt.GrantDebitUJ); err != nil {
			return resp, fmt.Errorf("serve %s: sealed, but settling grant hold %d: %w", id, hold.ID, err)
		}
		lap(&ev.Phases.Settle)
	}
	return resp, nil
}

// metered calls the engine inside a meter window and turns what the meter
// saw into an honest Energy. The engine's slot, when it has one, is taken
// before the window opens, so queueing is never metered. The estimate is
// always the backend's model applied to the tokens actually served. idle
// is set to the quiet stretch the reading's x_idle_uw subtracts.
//
// It also times the first output piece: ns from the serve's start to the
// first piece an engine.OptionBackend emitted, on the agent's clock (nil
// when the engine emitted nothing piece by piece, as a child engine does
// not when the caller takes the output whole: engine.Options.Whole).
func (a *Agent) metered(ctx context.Context, b engine.Backend, meter Meter, req wire.ServeRequest, prompt []byte, opts engine.Options, idle *spanIdle) (engine.Result, wire.Energy, wire.Metering, *uint64, error) {
	*idle = spanIdle{}
	if sb, ok := b.(engine.Slotted); ok {
		held, release, err := sb.Acquire(ctx)
		if err != nil {
			return engine.Result{}, wire.Energy{}, wire.Metering{}, nil, err
		}
		defer release()
		ctx = held
	}
	var win Window
	var meterErr error
	if meter != nil {
		win, meterErr = meter.Open(ctx)
	}
	var first *uint64
	start := a.clock()
	if _, ok := b.(engine.OptionBackend); ok {
		// Time the first piece where the engine emits it. Emit is called
		// on the serving goroutine and never after ServeWith returns, so
		// first needs no lock; the caller's Emit, when there is one, still
		// receives every piece.
		emit := opts.Emit
		opts.Emit = func(p []byte) error {
			if first == nil && len(p) > 0 {
				ns := uint64(max(a.clock().Sub(start), 0).Nanoseconds())
				first = &ns
			}
			if emit != nil {
				return emit(p)
			}
			return nil
		}
	}
	res, err := serveOn(ctx, b, req, prompt, opts)
	span := a.clock().Sub(start)
	var reading wire.Reading
	if win != nil {
		// Close even when the engine failed, so the window is released.
		reading, meterErr = win.Close(ctx)
		if iw, ok := win.(idleWindow); ok && meterErr == nil {
			if st, ok := iw.IdleStretch(); ok {
				*idle = spanIdle{span: iw.Span(), stretch: st}
			}
		}
	}
	if err != nil {
		return engine.Result{}, wire.Energy{}, wire.Metering{}, nil, err
	}
	if err := res.Outcome.Validate(); err != nil {
		return engine.Result{}, wire.Energy{}, wire.Metering{}, nil, fmt.Errorf("engine reported an impossible outcome: %w", err)
	}
	if up := res.Upstream; up != nil {
		// A forwarded serve's energy is the upstream's, with the evidence
		// its receipt carries: the steward judges it by the same rules, so
		// the claim is never better than the upstream's. Whatever a local
		// meter saw is the forwarding, not the serve.
		if err := up.Energy.Validate(); err != nil {
			return engine.Result{}, wire.Energy{}, wire.Metering{}, nil, fmt.Errorf("upstream receipt %s: %w", up.Receipt, err)
		}
		// Its idle figure is backed by a record in the upstream's chain,
		// which this chain cannot name: it is not carried.
		m := up.Metering
		m.IdleUW = nil
		return res, up.Energy, m, nil, nil
	}
	est := estimate(b.UJPerToken(), uint64(res.Outcome.TokensIn)+uint64(res.Outcome.TokensOut))
	if win != nil && meterErr == nil {
		switch reading.Provenance {
		case wire.HwShunt:
			return res, wire.Measured(reading.EnergyUJ, est), reading.Metering, first, nil
		case wire.ModelBased:
			// The meter-derived figure is a model: it is carried as the
			// estimate, never as measured.
			return res, wire.Modelled(nil, reading.EnergyUJ), reading.Metering, first, nil
		}
	}
	if meter != nil {
		a.log.Warn("serve sealed as Estimator: the meter measured nothing", "backend", b.Name(), "meter", meter.Name(), "err", meterErr)
	}
	// No meter, or a meter that saw nothing valid: say so, never a zero.
	return res, wire.Estimated(est), estimatorMetering(span), first, nil
}

// serveOn runs the engine with opts. A backend without options support
// serves plain requests, and streams by emitting its whole output at
// once; it cannot render chat.
// clampFirstToken is x_first_token_ns for a sealed serve: the agent's
// time to the first piece, at most the meter's x_serve_ns (two clocks
// timing one interval may disagree by their resolution; the first piece
// was emitted within the serve). None for a serve with no output, and none
// for a forwarded serve: its x_serve_ns is the upstream's interval, not
// the one the piece was timed in.
func clampFirstToken(first *uint64, serveNs uint64, res engine.Result) *uint64 {
	if first == nil || res.Outcome.TokensOut == 0 || res.Upstream != nil {
		return nil
	}
	v := min(*first, serveNs)
	return &v
}

func serveOn(ctx context.Context, b engine.Backend, req wire.ServeRequest, prompt []byte, opts engine.Options) (engine.Result, error) {
	if ob, ok := b.(engine.OptionBackend); ok && (opts.Chat || opts.Emit != nil || len(opts.Stop) > 0 || opts.Embed) {
		return ob.ServeWith(ctx, req, prompt, opts)
	}
	if opts.Chat {
		return engine.Result{}, engine.ErrNoChat
	}
	if len(opts.Stop) > 0 {
		return engine.Result{}, engine.ErrNoStop
	}
	if opts.Embed {
		return engine.Result{}, engine.ErrNoEmbed
	}
	res, err := b.Serve(ctx, req, prompt)
	if err == nil && opts.Emit != nil && len(res.Output) > 0 {
		if err := opts.Emit(res.Output); err != nil {
			return engine.Result{}, err
		}
	}
	return res, err
}

// byCapability keeps the candidates that can serve an embedding serve
// (embed) or any other; none left is engine.ErrNoEmbed, a bad request.
func byCapability(candidates []engine.Backend, embed bool) ([]engine.Backend, error) {
	var out []engine.Backend
	for _, b := range candidates {
		if engine.Embeds(b) == embed {
			out = append(out, b)
		}
	}
	if len(out) == 0 && len(candidates) > 0 {
		if embed {
			return nil, fmt.Errorf("%w: %w: no embedding backend among %s", wire.ErrBadRequest, engine.ErrNoEmbed, names(candidates))
		}
		return nil, fmt.Errorf("%w: %w: %s only embeds", wire.ErrBadRequest, engine.ErrNoEmbed, names(candidates))
	}
	return out, nil
}

func names(bs []engine.Backend) string {
	s := make([]string, len(bs))
	for i, b := range bs {
		s[i] = b.Name()
	}
	return strings.Join(s, ", ")
}

func estimatorMetering(span time.Duration) wire.Metering {
	ns := uint64(max(span, 0).Nanoseconds())
	return wire.Metering{Meter: EstimatorMeter, Kind: wire.KindEstimator, WindowNs: ns, ServeNs: ns}
}

// seal asks the steward to seal draft. The steward, not the meter, decides
// whether the evidence supports the provenance claimed; a meter that
// claimed more than its evidence shows is held to less — HwShunt becomes
// ModelBased, and evidence not even a model can rest on becomes Estimator —
// and the downgrade is logged, never silent.
func (a *Agent) seal(ctx context.Context, d steward.Draft, res engine.Result, b engine.Backend) (*steward.Sealed, error) {
	sealed, err := a.steward.Seal(ctx, d)
	if err == nil || !errors.Is(err, steward.ErrField) || d.Energy.Provenance() == wire.Estimator {
		return sealed, err
	}
	for _, next := range []wire.Provenance{wire.ModelBased, wire.Estimator} {
		if next <= d.Energy.Provenance() {
			continue
		}
		a.log.Warn("meter evidence refused; claiming less", "from", d.Energy.Provenance(), "to", next, "err", err)
		if next == wire.ModelBased {
			d.Energy = wire.Modelled(nil, d.Energy.UJ())
		} else {
			d.Energy = wire.Estimated(estimate(b.UJPerToken(), uint64(res.Outcome.TokensIn)+uint64(res.Outcome.TokensOut)))
			d.Metering = estimatorMetering(time.Duration(d.Metering.ServeNs))
		}
		if sealed, err = a.steward.Seal(ctx, d); err == nil || !errors.Is(err, steward.ErrField) {
			return sealed, err
		}
	}
	return nil, err
}

// reportsUnhealthy reports whether b now says it is unhealthy.
func reportsUnhealthy(b engine.Backend) bool {
	h, ok := b.(engine.HealthReporter)
	return ok && h.Health() != nil
}

func estimate(ujPerToken, tokens uint64) uint64 {
	hi, lo := bits.Mul64(ujPerToken, tokens)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

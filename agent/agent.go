package agent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
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
	backends     []engine.Backend
	meter        Meter // nil: no hardware, figures are Estimator
	steward      *steward.Steward
	clock        func() time.Time
	grants       *grant.Authoriser
	mustHave     bool
	requireMeter bool // refuse to serve while the meter is unhealthy
	costs        *costs
	log          *slog.Logger
}

// Config assembles an Agent.
type Config struct {
	// Backends in registration order, which breaks routing ties.
	Backends []engine.Backend
	// Meter wraps each engine call; nil means Estimator provenance.
	Meter   Meter
	Steward *steward.Steward
	// Clock measures window lengths for estimator figures; nil = time.Now.
	Clock func() time.Time
	// Grants authorises granted serves (phase 1); nil refuses any grant.
	Grants *grant.Authoriser
	// RequireGrant refuses every serve that carries no grant.
	RequireGrant bool
	// RequireMeter is the refuse-when-unmetered policy: while the meter
	// reports itself unhealthy (a stalled or dead sensor) the agent
	// refuses serves rather than seal Estimator receipts. It needs a Meter.
	RequireMeter bool
	// Logger receives what the agent decides on its own (a figure claimed
	// less than the meter offered); nil discards.
	Logger *slog.Logger
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
	seen := map[string]bool{}
	for _, b := range cfg.Backends {
		if seen[b.Name()] {
			return nil, fmt.Errorf("agent: backend name %q registered twice", b.Name())
		}
		seen[b.Name()] = true
	}
	if cfg.RequireMeter && cfg.Meter == nil {
		return nil, errors.New("agent: RequireMeter needs a meter")
	}
	if cfg.RequireGrant && cfg.Grants == nil {
		return nil, errors.New("agent: RequireGrant needs a grant authoriser")
	}
	// An authoriser for another steward id would honour grants addressed
	// elsewhere, spending at this steward budget meant for that one.
	if cfg.Grants != nil && !cfg.Grants.Steward().Equal(cfg.Steward.Public()) {
		return nil, fmt.Errorf("agent: the grant authoriser is for steward %x, this agent seals as %s",
			[]byte(cfg.Grants.Steward()), hex.EncodeToString(cfg.Steward.Public()))
	}
	a := &Agent{backends: cfg.Backends, meter: cfg.Meter, steward: cfg.Steward, clock: cfg.Clock,
		grants: cfg.Grants, mustHave: cfg.RequireGrant, requireMeter: cfg.RequireMeter, costs: newCosts(), log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.clock == nil {
		a.clock = time.Now
	}
	return a, nil
}

// Response is a completed serve.
type Response struct {
	RequestID wire.ContentID
	Decision  Decision
	Sealed    *steward.Sealed
	Output    []byte
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
	return a.ServeGranted(ctx, req, prompt, nil)
}

// ServeGranted is Serve riding on a grant envelope (nil for none). Phase 1
// verifies the grant and holds the request's joule ceiling on its budget
// before routing or any engine work; the hold is settled at the sealed
// receipt's charge, or released if the serve fails. If the ledger refuses
// the settlement the response is returned together with the error: the
// receipt is durable and the ledger settles from it when next opened.
func (a *Agent) ServeGranted(ctx context.Context, req wire.ServeRequest, prompt []byte, grantEnv []byte) (resp *Response, err error) {
	id, err := req.ID()
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if got := wire.ContentOf(prompt); got != req.PromptHash {
		return nil, fmt.Errorf("serve: %w: prompt_hash %s does not address the prompt sent (%s)", wire.ErrBadRequest, req.PromptHash, got)
	}
	if a.requireMeter {
		if hc, ok := a.meter.(HealthChecker); ok {
			if err := hc.Health(); err != nil {
				return nil, fmt.Errorf("serve %s: %w: %v", id, ErrUnmetered, err)
			}
		}
	}
	var hold *grant.Hold
	switch {
	case grantEnv == nil && a.mustHave:
		return nil, fmt.Errorf("serve %s: %w: this agent serves only granted requests", id, ErrGrantRequired)
	case grantEnv != nil && a.grants == nil:
		return nil, fmt.Errorf("serve %s: %w: a grant was presented but no trusted issuers are configured", id, ErrGrantRequired)
	case grantEnv != nil:
		if hold, err = a.grants.Authorise(ctx, grantEnv, id, req.JouleCeilingUJ); err != nil {
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
	dec, err := route(req, a.backends, func(b engine.Backend) (uint64, string) { return a.costs.cost(b.Name(), b.UJPerToken()) })
	if err != nil {
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s: %w", id, err)}
	}
	b := a.backends[dec.Chosen]
	res, energy, meter, err := a.metered(ctx, b, req, prompt)
	if err != nil {
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s on %s: %w", id, b.Name(), err)}
	}
	draft := steward.Draft{
		Request:  id,
		Backend:  b.Name(),
		Recipe:   b.Recipe(),
		Route:    dec.Justification,
		Outcome:  res.Outcome,
		Floor:    req.FidelityFloor,
		Served:   b.Fidelity(),
		Energy:   energy,
		Metering: meter,
	}
	if hold != nil {
		// The grant is debited the charged figure, capped at the hold the
		// caller authorised: a serve that cost more than its ceiling never
		// overdraws the budget, and its receipt shows the overrun.
		g, h, debit := hold.Grant, hold.ID, min(energy.UJ(), req.JouleCeilingUJ)
		draft.Grant, draft.GrantHold, draft.GrantDebit = &g, &h, &debit
	}
	sealed, err := a.seal(ctx, draft, res, b)
	if err != nil {
		return nil, &ServeError{Decision: dec, Err: fmt.Errorf("serve %s: %w", id, err)}
	}
	if e, err := sealed.Receipt.Energy(); err == nil {
		a.costs.observe(b.Name(), e.Provenance(), e.UJ(), uint64(res.Outcome.TokensIn)+uint64(res.Outcome.TokensOut))
	}
	resp = &Response{RequestID: id, Decision: dec, Sealed: sealed, Output: res.Output}
	if hold != nil {
		// The receipt is the truth the ledger recovers from, so settle at
		// exactly the debit it states.
		if err := hold.Settle(*sealed.Receipt.GrantDebitUJ); err != nil {
			return resp, fmt.Errorf("serve %s: sealed, but settling grant hold %d: %w", id, hold.ID, err)
		}
	}
	return resp, nil
}

// metered calls the engine inside a meter window and turns what the meter
// saw into an honest Energy. The engine's slot, when it has one, is taken
// before the window opens, so queueing is never metered. The estimate is
// always the backend's model applied to the tokens actually served.
func (a *Agent) metered(ctx context.Context, b engine.Backend, req wire.ServeRequest, prompt []byte) (engine.Result, wire.Energy, wire.Metering, error) {
	if sb, ok := b.(engine.Slotted); ok {
		held, release, err := sb.Acquire(ctx)
		if err != nil {
			return engine.Result{}, wire.Energy{}, wire.Metering{}, err
		}
		defer release()
		ctx = held
	}
	var win Window
	var meterErr error
	if a.meter != nil {
		win, meterErr = a.meter.Open(ctx)
	}
	start := a.clock()
	res, err := b.Serve(ctx, req, prompt)
	span := a.clock().Sub(start)
	var reading wire.Reading
	if win != nil {
		// Close even when the engine failed, so the window is released.
		reading, meterErr = win.Close(ctx)
	}
	if err != nil {
		return engine.Result{}, wire.Energy{}, wire.Metering{}, err
	}
	if err := res.Outcome.Validate(); err != nil {
		return engine.Result{}, wire.Energy{}, wire.Metering{}, fmt.Errorf("engine reported an impossible outcome: %w", err)
	}
	est := estimate(b.UJPerToken(), uint64(res.Outcome.TokensIn)+uint64(res.Outcome.TokensOut))
	if win != nil && meterErr == nil {
		switch reading.Provenance {
		case wire.HwShunt:
			return res, wire.Measured(reading.EnergyUJ, est), reading.Metering, nil
		case wire.ModelBased:
			// The meter-derived figure is a model: it is carried as the
			// estimate, never as measured.
			return res, wire.Modelled(nil, reading.EnergyUJ), reading.Metering, nil
		}
	}
	if a.meter != nil {
		a.log.Warn("serve sealed as Estimator: the meter measured nothing", "meter", a.meter.Name(), "err", meterErr)
	}
	// No meter, or a meter that saw nothing valid: say so, never a zero.
	return res, wire.Estimated(est), estimatorMetering(span), nil
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

func estimate(ujPerToken, tokens uint64) uint64 {
	hi, lo := bits.Mul64(ujPerToken, tokens)
	if hi != 0 {
		return ^uint64(0)
	}
	return lo
}

package agent

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// RouteCandidate is the router's record of one backend it weighed (§4).
type RouteCandidate struct {
	Backend    string
	Fidelity   wire.Fidelity
	EstTotalUJ uint64
	// Overflow is set when the estimate does not fit in 64 bits; such a
	// backend is over any ceiling.
	Overflow   bool
	Admissible bool
	// Reason says why an inadmissible backend was passed over.
	Reason string
	// Verdict is the candidate's verdict as the receipt records it in
	// x_route_candidates (PROFILE §4).
	Verdict steward.Verdict
}

// Decision is the outcome of routing one request.
type Decision struct {
	Candidates []RouteCandidate
	// Chosen indexes Candidates and the backend list; -1 when none.
	Chosen int
	// Justification is the one-line, human-readable reason for the route
	// (or for the refusal), sealed into the receipt as `route`.
	Justification string
	// Failed counts the backends tried for this serve that failed before
	// Chosen served it.
	Failed int
	floor  wire.Fidelity
	notes  []string // where each candidate's µJ/token came from
}

// ErrNoRoute is wrapped when no backend is admissible.
var ErrNoRoute = errors.New("no admissible backend")

// Route applies §4 cheapest-sufficient routing: a backend is admissible iff
// its fidelity is at least the floor and uj_per_token × (prompt_tokens +
// max_tokens) is at most the ceiling; the admissible backend with the
// lowest estimate wins, ties going to the earliest registered. Every
// backend weighed is recorded. When none is admissible the decision is
// returned together with an error wrapping ErrNoRoute that says why.
func Route(req wire.ServeRequest, backends []engine.Backend) (Decision, error) {
	return route(req, backends, nil)
}

// route is Route with each backend's µJ/token taken from cost (nil: the
// configured figure); the justification names where the chosen figure came
// from.
func route(req wire.ServeRequest, backends []engine.Backend, cost func(engine.Backend) (uint64, string)) (Decision, error) {
	if cost == nil {
		cost = func(b engine.Backend) (uint64, string) {
			return b.UJPerToken(), fmt.Sprintf("configured %d µJ/token", b.UJPerToken())
		}
	}
	notes := make([]string, len(backends))
	d := Decision{Chosen: -1, Candidates: make([]RouteCandidate, len(backends)), floor: req.FidelityFloor, notes: notes}
	if err := req.Validate(); err != nil {
		return d, err
	}
	tokens := uint64(req.PromptTokens) + uint64(req.MaxTokens)
	for i, b := range backends {
		c := RouteCandidate{Backend: b.Name(), Fidelity: b.Fidelity()}
		per, note := cost(b)
		notes[i] = note
		hi, lo := bits.Mul64(per, tokens)
		c.EstTotalUJ, c.Overflow = lo, hi != 0
		// Floor and ceiling first: they follow from the candidate's
		// numbers, so the receipt's reader can check them; health is asked
		// only of a backend that would otherwise be admissible.
		switch {
		case c.Fidelity < req.FidelityFloor:
			c.Reason, c.Verdict = fmt.Sprintf("below floor: %v < %v", c.Fidelity, req.FidelityFloor), steward.VerdictBelowFloor
		case c.Overflow:
			c.Reason, c.Verdict = fmt.Sprintf("over ceiling: estimate overflows 64 bits > %d µJ", req.JouleCeilingUJ), steward.VerdictOverCeiling
		case c.EstTotalUJ > req.JouleCeilingUJ:
			c.Reason, c.Verdict = fmt.Sprintf("over ceiling: est %d µJ > %d µJ", c.EstTotalUJ, req.JouleCeilingUJ), steward.VerdictOverCeiling
		default:
			var sick error
			if h, ok := b.(engine.HealthReporter); ok {
				sick = h.Health()
			}
			if sick != nil {
				c.Reason, c.Verdict = fmt.Sprintf("unhealthy: %v", sick), steward.VerdictUnhealthy
				break
			}
			c.Admissible, c.Verdict = true, steward.VerdictAdmissible
		}
		d.Candidates[i] = c
	}
	d.Chosen = d.cheapest()
	if d.Chosen < 0 {
		d.Justification = refusal(req, d.Candidates)
		return d, fmt.Errorf("%w: %s", ErrNoRoute, d.Justification)
	}
	d.justify(req.JouleCeilingUJ)
	return d, nil
}

// cheapest is the admissible candidate with the lowest estimate, ties to
// the earliest weighed; -1 when none is admissible.
func (d *Decision) cheapest() int {
	best := -1
	for i, c := range d.Candidates {
		if c.Admissible && (best < 0 || c.EstTotalUJ < d.Candidates[best].EstTotalUJ) {
			best = i
		}
	}
	return best
}

// justify writes the one-line route for Chosen.
func (d *Decision) justify(ceiling uint64) {
	c := d.Candidates[d.Chosen]
	admissible := 0
	for _, x := range d.Candidates {
		if x.Admissible {
			admissible++
		}
	}
	after := ""
	if d.Failed > 0 {
		after = fmt.Sprintf(" after %d failed", d.Failed)
	}
	note := ""
	if d.Chosen < len(d.notes) {
		note = d.notes[d.Chosen]
	}
	d.Justification = fmt.Sprintf("%s: cheapest of %d admissible (of %d weighed)%s at %v >= %v, est %d µJ <= ceiling %d µJ (%s)",
		c.Backend, admissible, len(d.Candidates), after, c.Fidelity, d.floor, c.EstTotalUJ, ceiling, note)
}

// fallBack records that Chosen was tried and failed with err, and moves
// Chosen to the next cheapest admissible candidate. It reports false, and
// leaves the decision unchanged, when there is none.
func (d *Decision) fallBack(err error, ceiling uint64) bool {
	// A backend that may have served the request (a node that had all of
	// it when the answer failed) is not retried elsewhere: the request
	// would run, and be charged, twice.
	var served interface{ MayHaveServed() bool }
	if d.Chosen < 0 || errors.As(err, &served) && served.MayHaveServed() {
		return false
	}
	prev := d.Chosen
	c := &d.Candidates[prev]
	c.Admissible = false
	next := d.cheapest()
	if next < 0 {
		c.Admissible = true
		return false
	}
	c.Reason, c.Verdict = fmt.Sprintf("failed: %v", err), steward.VerdictFailed
	d.Chosen = next
	d.Failed++
	d.justify(ceiling)
	return true
}

// receipt is the decision as x_route_candidates records it.
func (d *Decision) receipt() []steward.Candidate {
	out := make([]steward.Candidate, len(d.Candidates))
	for i, c := range d.Candidates {
		out[i] = steward.Candidate{Backend: c.Backend, Fidelity: c.Fidelity, EstTotalUJ: c.EstTotalUJ, Overflow: c.Overflow, Verdict: c.Verdict}
		if c.Overflow {
			out[i].EstTotalUJ = 0
		}
	}
	return out
}

func refusal(req wire.ServeRequest, cs []RouteCandidate) string {
	if len(cs) == 0 {
		return "no backends registered"
	}
	below, over, sick := 0, 0, 0
	for _, c := range cs {
		switch {
		case strings.HasPrefix(c.Reason, "unhealthy"):
			sick++
		case c.Fidelity < req.FidelityFloor:
			below++
		default:
			over++
		}
	}
	why := fmt.Sprintf("none of %d backends admissible for floor %v and ceiling %d µJ: %d below floor, %d over ceiling",
		len(cs), req.FidelityFloor, req.JouleCeilingUJ, below, over)
	if sick > 0 {
		why += fmt.Sprintf(", %d unhealthy", sick)
	}
	return why
}

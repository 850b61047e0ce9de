package agent

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"meshd/engine"
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
}

// Decision is the outcome of routing one request.
type Decision struct {
	Candidates []RouteCandidate
	// Chosen indexes Candidates and the backend list; -1 when none.
	Chosen int
	// Justification is the one-line, human-readable reason for the route
	// (or for the refusal), sealed into the receipt as `route`.
	Justification string
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
	d := Decision{Chosen: -1, Candidates: make([]RouteCandidate, len(backends))}
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
		var sick error
		if h, ok := b.(engine.HealthReporter); ok {
			sick = h.Health()
		}
		switch {
		case sick != nil:
			c.Reason = fmt.Sprintf("unhealthy: %v", sick)
		case c.Fidelity < req.FidelityFloor:
			c.Reason = fmt.Sprintf("below floor: %v < %v", c.Fidelity, req.FidelityFloor)
		case c.Overflow:
			c.Reason = fmt.Sprintf("over ceiling: estimate overflows 64 bits > %d µJ", req.JouleCeilingUJ)
		case c.EstTotalUJ > req.JouleCeilingUJ:
			c.Reason = fmt.Sprintf("over ceiling: est %d µJ > %d µJ", c.EstTotalUJ, req.JouleCeilingUJ)
		default:
			c.Admissible = true
			if d.Chosen < 0 || c.EstTotalUJ < d.Candidates[d.Chosen].EstTotalUJ {
				d.Chosen = i
			}
		}
		d.Candidates[i] = c
	}
	if d.Chosen < 0 {
		d.Justification = refusal(req, d.Candidates)
		return d, fmt.Errorf("%w: %s", ErrNoRoute, d.Justification)
	}
	c := d.Candidates[d.Chosen]
	admissible := 0
	for _, x := range d.Candidates {
		if x.Admissible {
			admissible++
		}
	}
	d.Justification = fmt.Sprintf("%s: cheapest of %d admissible (of %d weighed) at %v >= %v, est %d µJ <= ceiling %d µJ (%s)",
		c.Backend, admissible, len(d.Candidates), c.Fidelity, req.FidelityFloor, c.EstTotalUJ, req.JouleCeilingUJ, notes[d.Chosen])
	return d, nil
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

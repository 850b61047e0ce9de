package agent

import (
	"errors"
	"fmt"

	"meshd/engine"
	"meshd/wire"
)

// ErrOverLimit is wrapped when a serve asks for more than this node
// allows: more tokens than any backend it could route to serves, or a
// joule ceiling over the configured cap. Such a serve is refused before
// any work: no grant hold, no routing, no engine (PROFILE §16).
var ErrOverLimit = errors.New("over a limit")

// LimitError is a serve refused by ErrOverLimit, naming the request field
// at fault and the cap it passed. It is a bad request.
type LimitError struct {
	// Field is the mesh/1 field: "max_tokens" or "joule_ceiling_uj".
	Field string
	// Got is what the request asked for, Cap the most that is served.
	Got, Cap uint64
	// Of says whose cap it is (a backend, the node's [limits]).
	Of string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s %d is over %s's cap of %d", e.Field, e.Got, e.Of, e.Cap)
}

// Unwrap makes a LimitError both ErrOverLimit and wire.ErrBadRequest.
func (e *LimitError) Unwrap() []error { return []error{ErrOverLimit, wire.ErrBadRequest} }

// tokenCap is b's max_tokens cap; 0 when it states none.
func tokenCap(b engine.Backend) uint32 {
	if c, ok := b.(engine.TokenCapped); ok {
		return c.TokenCap()
	}
	return 0
}

// admitLimits checks req against the ceiling cap and the candidates'
// max_tokens caps, and returns the candidates whose cap admits
// req.MaxTokens: a backend that would refuse the serve is never weighed.
// When none does, the error names the largest cap among them.
func admitLimits(req wire.ServeRequest, candidates []engine.Backend, maxCeilingUJ uint64) ([]engine.Backend, error) {
	if maxCeilingUJ > 0 && req.JouleCeilingUJ > maxCeilingUJ {
		return nil, &LimitError{Field: "joule_ceiling_uj", Got: req.JouleCeilingUJ, Cap: maxCeilingUJ, Of: "this node"}
	}
	admits := func(b engine.Backend) bool { c := tokenCap(b); return c == 0 || req.MaxTokens <= c }
	all := true
	for _, b := range candidates {
		all = all && admits(b)
	}
	if all {
		return candidates, nil
	}
	// A new slice: the table's is shared by every serve. The refusal
	// weighs only backends that meet the floor: a short backend below it
	// could not serve anyway, and max_tokens is then what the caller can
	// change.
	var kept []engine.Backend
	var best uint32
	var bestName string
	floorMet, floorKept := 0, 0
	for _, b := range candidates {
		ok := admits(b)
		if ok {
			kept = append(kept, b)
		}
		if b.Fidelity() < req.FidelityFloor {
			continue
		}
		floorMet++
		if ok {
			floorKept++
		} else if c := tokenCap(b); c > best {
			best, bestName = c, b.Name()
		}
	}
	if floorKept == 0 && floorMet > 0 {
		of := "backend " + bestName
		if floorMet > 1 {
			of = fmt.Sprintf("the largest of %d backends at %v or above (%s)", floorMet, req.FidelityFloor, bestName)
		}
		return nil, &LimitError{Field: "max_tokens", Got: uint64(req.MaxTokens), Cap: uint64(best), Of: of}
	}
	return kept, nil
}

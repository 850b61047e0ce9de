package api

import "meshd/steward"

// RouteCandidate is one backend the router weighed, parsed from the
// receipt's x_route_candidates (PROFILE §4) so that a client need not
// implement the grammar to read the route.
type RouteCandidate struct {
	Backend  string `json:"backend"`
	Fidelity string `json:"fidelity"`
	// EstTotalUJ is absent when the estimate overflowed 64 bits
	// (Overflow), which is over any ceiling.
	EstTotalUJ *uint64 `json:"est_total_uj,omitempty"`
	Overflow   bool    `json:"overflow,omitempty"`
	Verdict    string  `json:"verdict"`
}

// RouteCandidates is r's x_route_candidates parsed, nil when the receipt
// carries none. The receipt has been checked, so they parse; one that
// does not is left out rather than guessed at.
func RouteCandidates(r *steward.Receipt) []RouteCandidate {
	cs, err := r.Candidates()
	if err != nil || cs == nil {
		return nil
	}
	out := make([]RouteCandidate, len(cs))
	for i, c := range cs {
		out[i] = RouteCandidate{Backend: c.Backend, Fidelity: c.Fidelity.String(), Overflow: c.Overflow, Verdict: string(c.Verdict)}
		if !c.Overflow {
			est := c.EstTotalUJ
			out[i].EstTotalUJ = &est
		}
	}
	return out
}

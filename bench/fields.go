package bench

import (
	"meshd/steward"
)

// statUJ is a receipt's x_stat_uj (PROFILE §6): the statistical
// uncertainty, µJ, a point meter states beside its bound.
func statUJ(r *steward.Receipt) (uint64, bool) {
	if r.StatUJ == nil {
		return 0, false
	}
	return *r.StatUJ, true
}

// firstTokenNs is a receipt's x_first_token_ns: the daemon's time from
// the serve's start to the engine's first output piece.
func firstTokenNs(r *steward.Receipt) (uint64, bool) {
	if r.FirstTokenNs == nil {
		return 0, false
	}
	return *r.FirstTokenNs, true
}

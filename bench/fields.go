package bench

import (
	"meshd/steward"
	"meshd/wire"
)

// statUJ is a receipt's x_stat_uj (PROFILE §6): the statistical
// uncertainty, µJ, a point meter states beside its bound. It is read
// from the receipt's extensions, where a receipt of an implementation
// that seals it keeps the key; a steward.Receipt field for it replaces
// this lookup.
func statUJ(r *steward.Receipt) (uint64, bool) {
	for _, x := range r.Foreign {
		if x.Key != "x_stat_uj" {
			continue
		}
		major, v, end, err := wire.ReadHead(x.Value, 0)
		if err != nil || major != wire.MajorUint || end != len(x.Value) {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// firstTokenNs is a receipt's x_first_token_ns: the daemon's time from
// the serve's start to the engine's first output piece.
func firstTokenNs(r *steward.Receipt) (uint64, bool) {
	if r.FirstTokenNs == nil {
		return 0, false
	}
	return *r.FirstTokenNs, true
}

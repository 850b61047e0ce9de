package config

import "fmt"

// Limits bound the work one request may ask for, checked before any work
// is done (PROFILE §16).
type Limits struct {
	// MaxJouleCeilingUJ is the largest joule_ceiling_uj a serve may name,
	// in µJ; default DefaultMaxJouleCeilingUJ, must be > 0 and at least
	// defaults.joule_ceiling_uj. A grant's hold is the ceiling, so this
	// also bounds what one serve can reserve of a budget.
	MaxJouleCeilingUJ uint64 `toml:"max_joule_ceiling_uj,omitempty"`
}

// DefaultMaxJouleCeilingUJ is the ceiling cap when [limits] names none:
// 1 MJ, a thousand default ceilings, more than a 3 kW machine draws in
// the default serve_timeout of 5 minutes: no serve can honestly need a
// larger ceiling, and 2^64-1 is no longer a ceiling at all.
const DefaultMaxJouleCeilingUJ = 1_000_000_000_000

// MaxBackendTokens is the largest [[backend]] max_tokens: the llama.cpp
// family reads n_predict as a signed 32-bit int.
const MaxBackendTokens = 1<<31 - 1

// limitDefaults fills [limits].
func limitDefaults(ix *index, c *Config) {
	if !ix.has("limits.max_joule_ceiling_uj") {
		c.Limits.MaxJouleCeilingUJ = DefaultMaxJouleCeilingUJ
	}
}

// limits checks [limits] and each backend's max_tokens.
func (v *checker) limits() {
	l := v.c.Limits
	if l.MaxJouleCeilingUJ == 0 {
		v.problem("limits.max_joule_ceiling_uj", "must be > 0: a zero cap admits no serve")
	} else if d := v.c.Defaults.JouleCeilingUJ; d > l.MaxJouleCeilingUJ {
		key := "limits.max_joule_ceiling_uj"
		if v.ix.has("defaults.joule_ceiling_uj") {
			key = "defaults.joule_ceiling_uj"
		}
		v.problem(key, "defaults.joule_ceiling_uj %d is over limits.max_joule_ceiling_uj %d: every serve that names no ceiling would be refused", d, l.MaxJouleCeilingUJ)
	}
	for i, b := range v.c.Backends {
		k := fmt.Sprintf("backend[%d].max_tokens", i)
		if !v.ix.has(k) {
			continue
		}
		switch {
		case b.MaxTokens < 1 || b.MaxTokens > MaxBackendTokens:
			v.problem(k, "%d is outside 1..%d (omit it for the engine's context)", b.MaxTokens, MaxBackendTokens)
		case b.Context > 0 && b.MaxTokens > int64(b.Context):
			v.problem(k, "%d is over the context %d: no serve generates more tokens than its context holds", b.MaxTokens, b.Context)
		}
	}
}

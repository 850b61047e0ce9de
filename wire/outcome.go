package wire

import "fmt"

// ServeOutcome holds the counters an engine reports for one serve (§5).
type ServeOutcome struct {
	TokensIn       uint32
	TokensOut      uint32
	TokensAccepted uint32
	CacheHitTokens uint32
	SpecProposed   uint32
	SpecAccepted   uint32
}

// Validate checks the relations between the counters that any honest
// engine satisfies.
func (o ServeOutcome) Validate() error {
	if o.TokensAccepted > o.TokensOut {
		return fmt.Errorf("serve outcome: tokens_accepted %d exceeds tokens_out %d", o.TokensAccepted, o.TokensOut)
	}
	if o.SpecAccepted > o.SpecProposed {
		return fmt.Errorf("serve outcome: spec_accepted %d exceeds spec_proposed %d", o.SpecAccepted, o.SpecProposed)
	}
	return nil
}

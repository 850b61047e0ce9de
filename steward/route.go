package steward

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"meshd/wire"
)

// RefusedRoute: x_ceiling_uj and x_route_candidates do not prove the route
// the receipt names (PROFILE.md §4): the candidate list does not parse,
// a verdict does not follow from its fidelity and estimate, or the backend
// served is not the cheapest admissible candidate. Never renamed.
const RefusedRoute Reason = "route"

// Verdict is what the router concluded of one backend it weighed.
type Verdict string

// The verdicts, as x_route_candidates spells them. The first three follow
// from the candidate's numbers alone; unhealthy and failed are the
// router's observations of a backend that was otherwise admissible.
const (
	// VerdictAdmissible: fidelity ≥ floor and estimate ≤ ceiling.
	VerdictAdmissible Verdict = "admissible"
	// VerdictBelowFloor: fidelity < floor.
	VerdictBelowFloor Verdict = "below floor"
	// VerdictOverCeiling: fidelity ≥ floor, estimate > ceiling.
	VerdictOverCeiling Verdict = "over ceiling"
	// VerdictUnhealthy: would be admissible, but the backend reported
	// itself unhealthy (a node passed over after a failure), so it was not
	// tried.
	VerdictUnhealthy Verdict = "unhealthy"
	// VerdictFailed: would be admissible and was tried for this serve
	// before the backend that served it, and failed.
	VerdictFailed Verdict = "failed"
)

// Candidate is one backend the router weighed, as x_route_candidates
// records it.
type Candidate struct {
	Backend  string
	Fidelity wire.Fidelity
	// EstTotalUJ is uj_per_token × (prompt_tokens + max_tokens) with the
	// µJ/token the router used (configured or learned); meaningless when
	// Overflow is set, which means the product exceeds 2^64−1.
	EstTotalUJ uint64
	Overflow   bool
	Verdict    Verdict
}

// overflowEst is the estimate token of a product beyond 64 bits.
const overflowEst = "overflow"

// maxCandidateNameDigits bounds a length prefix before it is converted, so that
// a hostile prefix is refused rather than overflowing.
const maxCandidateNameDigits = 9

// FormatCandidates writes cs in the x_route_candidates grammar
// (PROFILE.md §4):
//
//	candidates = candidate *( ";" candidate )
//	candidate  = length ":" name " " fidelity " " estimate " " verdict
//	length     = the byte length of name, decimal, no leading zeros, ≥ 1
//	fidelity   = "F0" / "F1" / "F2" / "F3" / "F4"
//	estimate   = decimal uint64, no leading zeros / "overflow"
//	verdict    = "admissible" / "below floor" / "over ceiling" / "unhealthy" / "failed"
//
// The name is length-prefixed, so it may hold any character (";", spaces,
// digits) without escaping. It refuses what the grammar cannot carry.
func FormatCandidates(cs []Candidate) (string, error) {
	if len(cs) == 0 {
		return "", fmt.Errorf("route candidates: none to record")
	}
	var b strings.Builder
	for i, c := range cs {
		if err := c.valid(); err != nil {
			return "", fmt.Errorf("route candidate %d: %w", i, err)
		}
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strconv.Itoa(len(c.Backend)))
		b.WriteByte(':')
		b.WriteString(c.Backend)
		b.WriteByte(' ')
		b.WriteString(c.Fidelity.String())
		b.WriteByte(' ')
		if c.Overflow {
			b.WriteString(overflowEst)
		} else {
			b.WriteString(strconv.FormatUint(c.EstTotalUJ, 10))
		}
		b.WriteByte(' ')
		b.WriteString(string(c.Verdict))
	}
	return b.String(), nil
}

func (c Candidate) valid() error {
	switch {
	case c.Backend == "":
		return fmt.Errorf("the backend name is empty")
	case !utf8.ValidString(c.Backend):
		return fmt.Errorf("the backend name %q is not UTF-8", c.Backend)
	case c.Fidelity > wire.F4:
		return fmt.Errorf("fidelity %d is not F0..F4", c.Fidelity)
	case c.Overflow && c.EstTotalUJ != 0:
		return fmt.Errorf("an overflowing estimate carries no value")
	}
	switch c.Verdict {
	case VerdictAdmissible, VerdictBelowFloor, VerdictOverCeiling, VerdictUnhealthy, VerdictFailed:
		return nil
	}
	return fmt.Errorf("verdict %q is not one of admissible, below floor, over ceiling, unhealthy, failed", c.Verdict)
}

// ParseCandidates parses the x_route_candidates grammar. Only the
// canonical text parses: the one FormatCandidates writes for the result,
// so a signed list has exactly one spelling.
func ParseCandidates(s string) ([]Candidate, error) {
	var out []Candidate
	for off := 0; ; {
		c, end, err := parseCandidate(s, off)
		if err != nil {
			return nil, fmt.Errorf("route candidate %d at byte %d: %w", len(out), off, err)
		}
		out = append(out, c)
		if end == len(s) {
			break
		}
		if s[end] != ';' {
			return nil, fmt.Errorf("route candidate %d ends at byte %d with %q, want \";\" or the end", len(out)-1, end, s[end])
		}
		off = end + 1
	}
	seen := make(map[string]int, len(out))
	for i, c := range out {
		if j, dup := seen[c.Backend]; dup {
			return nil, fmt.Errorf("route candidates %d and %d both name backend %q", j, i, c.Backend)
		}
		seen[c.Backend] = i
	}
	return out, nil
}

// parseCandidate parses one candidate starting at off and returns where it
// ends.
func parseCandidate(s string, off int) (Candidate, int, error) {
	colon := strings.IndexByte(s[off:], ':')
	if colon < 0 {
		return Candidate{}, 0, fmt.Errorf("no \":\" after the name's length")
	}
	n, err := canonicalUint(s[off:off+colon], maxCandidateNameDigits)
	if err != nil || n == 0 {
		return Candidate{}, 0, fmt.Errorf("the name's length %q is not a positive decimal without leading zeros", s[off:off+colon])
	}
	start := off + colon + 1
	if uint64(len(s)-start) < n {
		return Candidate{}, 0, fmt.Errorf("the name's length %d runs past the end", n)
	}
	end := start + int(n)
	c := Candidate{Backend: s[start:end]}
	if !utf8.ValidString(c.Backend) {
		return Candidate{}, 0, fmt.Errorf("the name is not UTF-8")
	}
	// The rest of the candidate, up to the next ";" or the end, holds no
	// name bytes, so it may be split on its separators.
	rest := s[end:]
	if semi := strings.IndexByte(rest, ';'); semi >= 0 {
		rest = rest[:semi]
	}
	tail := end + len(rest)
	if !strings.HasPrefix(rest, " ") {
		return Candidate{}, 0, fmt.Errorf("no space after the %d-byte name %q", n, c.Backend)
	}
	fid, more, ok := strings.Cut(rest[1:], " ")
	if !ok {
		return Candidate{}, 0, fmt.Errorf("%q is not \"<fidelity> <estimate> <verdict>\"", rest[1:])
	}
	if len(fid) != 2 || fid[0] != 'F' || fid[1] < '0' || fid[1] > '4' {
		return Candidate{}, 0, fmt.Errorf("fidelity %q is not F0..F4", fid)
	}
	c.Fidelity = wire.Fidelity(fid[1] - '0')
	est, v, ok := strings.Cut(more, " ")
	if est == overflowEst {
		c.Overflow = true
	} else if c.EstTotalUJ, err = canonicalUint(est, 20); err != nil {
		return Candidate{}, 0, fmt.Errorf("estimate %q is not a uint64 without leading zeros nor %q", est, overflowEst)
	}
	if !ok {
		return Candidate{}, 0, fmt.Errorf("no verdict after the estimate")
	}
	c.Verdict = Verdict(v)
	if err := c.valid(); err != nil {
		return Candidate{}, 0, err
	}
	return c, tail, nil
}

// canonicalUint parses a decimal of at most maxDigits digits with no sign
// and no leading zero.
func canonicalUint(s string, maxDigits int) (uint64, error) {
	if s == "" || len(s) > maxDigits || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("%q is not a canonical decimal", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a canonical decimal", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

// Candidates returns the parsed x_route_candidates, nil when the receipt
// does not carry them.
func (r *Receipt) Candidates() ([]Candidate, error) {
	if r.RouteCandidates == nil {
		return nil, nil
	}
	cs, err := ParseCandidates(*r.RouteCandidates)
	if err != nil {
		return nil, refuse(RefusedRoute, fmt.Errorf("%w: x_route_candidates: %v", ErrField, err))
	}
	return cs, nil
}

// routeErr is a route-rule violation.
func routeErr(format string, a ...any) error {
	return fieldErr(RefusedRoute, "route: "+format, a...)
}

// ranksBefore reports whether candidate a (at index i) is preferred to b
// (at index j) by §4's order: the lower estimate, ties to the earlier.
func ranksBefore(a Candidate, i int, b Candidate, j int) bool {
	switch {
	case a.Overflow != b.Overflow:
		return !a.Overflow
	case !a.Overflow && a.EstTotalUJ != b.EstTotalUJ:
		return a.EstTotalUJ < b.EstTotalUJ
	}
	return i < j
}

// checkRoute enforces the route rules of PROFILE.md §4 on a receipt that
// carries x_ceiling_uj or x_route_candidates: the route the receipt names
// must follow from the candidates, the floor and the ceiling.
func (r *Receipt) checkRoute() error {
	if (r.CeilingUJ == nil) != (r.RouteCandidates == nil) {
		return routeErr("x_ceiling_uj and x_route_candidates must be present together")
	}
	cs, err := r.Candidates()
	if err != nil {
		return err
	}
	floor, ceiling := wire.Fidelity(r.FidelityFloor), *r.CeilingUJ
	chosen := -1
	for i, c := range cs {
		var want []Verdict
		switch {
		case c.Fidelity < floor:
			want = []Verdict{VerdictBelowFloor}
		case c.Overflow || c.EstTotalUJ > ceiling:
			want = []Verdict{VerdictOverCeiling}
		default:
			want = []Verdict{VerdictAdmissible, VerdictUnhealthy, VerdictFailed}
		}
		ok := false
		for _, v := range want {
			ok = ok || c.Verdict == v
		}
		if !ok {
			return routeErr("candidate %q at %v with estimate %s against floor %v and ceiling %d µJ cannot be %q",
				c.Backend, c.Fidelity, estText(c), floor, ceiling, c.Verdict)
		}
		if c.Backend == r.Backend {
			chosen = i
		}
	}
	if chosen < 0 {
		return routeErr("backend %q is not among the %d candidates weighed", r.Backend, len(cs))
	}
	c := cs[chosen]
	if c.Verdict != VerdictAdmissible {
		return routeErr("backend %q served, but its candidate is %q", r.Backend, c.Verdict)
	}
	for i, o := range cs {
		switch {
		case o.Verdict == VerdictAdmissible && i != chosen && ranksBefore(o, i, c, chosen):
			return routeErr("backend %q (est %s µJ) served, but %q (est %s µJ) is admissible and ranks first: the cheapest admissible wins, ties to the earliest weighed",
				c.Backend, estText(c), o.Backend, estText(o))
		case o.Verdict == VerdictFailed && !ranksBefore(o, i, c, chosen):
			return routeErr("candidate %q failed, but it ranks after %q, which served: backends are tried cheapest first", o.Backend, c.Backend)
		}
	}
	// The served candidate is admissible, so it meets the floor.
	if r.FidelityMet != 1 {
		return routeErr("fidelity_met is %d, but backend %q served at %v, which meets floor %v", r.FidelityMet, c.Backend, c.Fidelity, floor)
	}
	return nil
}

func estText(c Candidate) string {
	if c.Overflow {
		return overflowEst
	}
	return strconv.FormatUint(c.EstTotalUJ, 10)
}

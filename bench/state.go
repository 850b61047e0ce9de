package bench

// The machine state at a run's open and close (PROFILE §20, §22): what
// the daemon read from sysfs and sealed in the run-open and run-close
// documents, shown by the report and checked against those documents.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	boardstate "meshd/agent/board"
	"meshd/rag"
	"meshd/steward"
)

// StateSection is the report's "state" section: board.State at the run's
// open and at its close, each exactly as its sealed document states it
// (absent where the document carries none).
type StateSection struct {
	Open  *boardstate.State `json:"open,omitempty"`
	Close *boardstate.State `json:"close,omitempty"`
}

// StateOf is the section the sealed documents give; a document whose
// state is not a board.State in canonical JSON is an error.
func StateOf(open *steward.RunOpenDoc, close *steward.RunCloseDoc) (StateSection, error) {
	var out StateSection
	var err error
	if open != nil && open.State != "" {
		if out.Open, err = parseState(open.State); err != nil {
			return StateSection{}, fmt.Errorf("the run-open record's state: %w", err)
		}
	}
	if close != nil && close.State != "" {
		if out.Close, err = parseState(close.State); err != nil {
			return StateSection{}, fmt.Errorf("the run-close record's state: %w", err)
		}
	}
	return out, nil
}

func parseState(s string) (*boardstate.State, error) {
	var st boardstate.State
	if err := decodeStrict([]byte(s), &st, "a board state"); err != nil {
		return nil, err
	}
	return &st, nil
}

// stateText is a state as its document states it: canonical JSON.
func stateText(st *boardstate.State) (string, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	c, err := rag.Canonical(raw)
	return string(c), err
}

// checkState compares the report's state section with the sealed run-open
// and run-close documents: each side must be the document's state byte
// for byte (as canonical JSON), and present exactly when the document's
// is. A nil document is one the report does not hold, so it is not
// compared.
func checkState(open *steward.RunOpenDoc, close *steward.RunCloseDoc, st StateSection) []Problem {
	var out []Problem
	for _, side := range []struct {
		place, record string
		doc           *string
		got           *boardstate.State
	}{
		{"state.open", "run-open", docState(open), st.Open},
		{"state.close", "run-close", docStateClose(close), st.Close},
	} {
		if side.doc == nil {
			continue
		}
		switch {
		case *side.doc == "" && side.got != nil:
			out = append(out, problemf(side.place, "the %s record seals no machine state, the report shows one", side.record))
		case *side.doc != "" && side.got == nil:
			out = append(out, problemf(side.place, "missing: the %s record seals the machine state", side.record))
		case side.got != nil:
			got, err := stateText(side.got)
			if err != nil {
				out = append(out, problemf(side.place, "%v", err))
			} else if got != *side.doc {
				out = append(out, problemf(side.place, "differs from the state the %s record seals", side.record))
			}
		}
	}
	return out
}

func docState(d *steward.RunOpenDoc) *string {
	if d == nil {
		return nil
	}
	return &d.State
}

func docStateClose(d *steward.RunCloseDoc) *string {
	if d == nil {
		return nil
	}
	return &d.State
}

// StateLine is one state in a line: the governors with their CPU counts,
// the range of current frequencies and the hottest zone.
func StateLine(st *boardstate.State) string {
	if st == nil {
		return "not recorded"
	}
	var parts []string
	govs := st.Governors()
	names := make([]string, 0, len(govs))
	for g := range govs {
		names = append(names, g)
	}
	sort.Strings(names)
	for i, g := range names {
		names[i] = fmt.Sprintf("%s×%d", g, govs[g])
	}
	switch {
	case len(st.CPUs) == 0:
		parts = append(parts, "no cpufreq")
	case len(names) > 0:
		parts = append(parts, "governor "+strings.Join(names, ", "))
	}
	var lo, hi uint64
	for _, c := range st.CPUs {
		if c.CurKHz == 0 {
			continue
		}
		if lo == 0 || c.CurKHz < lo {
			lo = c.CurKHz
		}
		hi = max(hi, c.CurKHz)
	}
	if hi > 0 {
		parts = append(parts, fmt.Sprintf("%s..%s MHz", Milli(lo), Milli(hi)))
	}
	if t, ok := st.MaxMilliC(); ok {
		zone := ""
		for _, z := range st.Thermal {
			if z.MilliC != nil && *z.MilliC == t {
				zone = z.Type
				break
			}
		}
		parts = append(parts, fmt.Sprintf("hottest %s °C (%s) of %d zones", Milli(t), zone, len(st.Thermal)))
	} else {
		parts = append(parts, fmt.Sprintf("no thermal reading (%d zones)", len(st.Thermal)))
	}
	return strings.Join(parts, "; ")
}

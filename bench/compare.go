package bench

// Compare: rank boards per cell only where the figures are comparable
// (PROFILE.md §20, §21).

import (
	"fmt"
	"sort"
	"strings"
)

// Entry is one report's figure for one cell, as Compare matches it.
type Entry struct {
	// Key is the cell the entry is matched by.
	Key Key
	// Name labels the report (its file name, say); Board the board.
	Name   string
	Board  string
	Recipe string
	Cell   CellSummary
}

// Provenance is the entry's provenance: the one name when all its serves
// agree, else the mix with counts.
func (e *Entry) Provenance() string { return ProvenanceText(e.Cell.Provenance) }

// Key is what Compare matches cells by: prompt×output in bench reports,
// backend/recipe in fleet reports (PROFILE §21).
type Key struct {
	Cell  Cell
	Fleet string // "backend/recipe"; empty for a bench cell
}

// String is the cell as tables name it: "4×8", or "backend/recipe".
func (k Key) String() string {
	if k.Fleet != "" {
		return k.Fleet
	}
	return k.Cell.String()
}

// less orders bench cells first, by prompt then output, then fleet cells.
func (k Key) less(o Key) bool {
	if (k.Fleet == "") != (o.Fleet == "") {
		return k.Fleet == ""
	}
	if k.Fleet != o.Fleet {
		return k.Fleet < o.Fleet
	}
	if k.Cell.Prompt != o.Cell.Prompt {
		return k.Cell.Prompt < o.Cell.Prompt
	}
	return k.Cell.Output < o.Cell.Output
}

// Entries are a verified bench report's cells as Compare matches them,
// named name.
func (v *Verified) Entries(name string) []Entry {
	var out []Entry
	for _, c := range v.Report.Body.Summary.Cells {
		out = append(out, Entry{Key: Key{Cell: Cell{c.PromptWords, c.MaxTokens}},
			Name: name, Board: v.Node.Label(), Recipe: v.Report.Body.Workload.Model.Resolved, Cell: c})
	}
	return out
}

// Comparison is one cell's entries, in the order given.
type Comparison struct {
	Key     Key
	Entries []*Entry
}

// Compare groups entries by cell, the cells in order (bench cells by
// prompt then output, then fleet cells).
func Compare(entries []Entry) []Comparison {
	byCell := map[Key][]*Entry{}
	for i := range entries {
		e := &entries[i]
		byCell[e.Key] = append(byCell[e.Key], e)
	}
	out := make([]Comparison, 0, len(byCell))
	for k, es := range byCell {
		out = append(out, Comparison{Key: k, Entries: es})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.less(out[j].Key) })
	return out
}

// Verdict is how one entry's figure compares with another's.
type Verdict struct {
	// A's median is not the larger.
	A, B *Entry
	Text string
}

// Verdicts compares every pair of the cell's entries, the smaller median
// first.
func (c Comparison) Verdicts() []Verdict {
	es := append([]*Entry(nil), c.Entries...)
	sort.SliceStable(es, func(i, j int) bool { return medianOf(es[i]) < medianOf(es[j]) })
	var out []Verdict
	for i := 0; i < len(es); i++ {
		for j := i + 1; j < len(es); j++ {
			out = append(out, Verdict{A: es[i], B: es[j], Text: verdict(es[i], es[j])})
		}
	}
	return out
}

func medianOf(e *Entry) int64 {
	if e.Cell.Gross == nil {
		return 1<<63 - 1
	}
	return int64(e.Cell.Gross.Median)
}

// verdict says how a's figure compares with b's (a's median is not the
// larger), or why the two are not ranked.
func verdict(a, b *Entry) string {
	pa, pb := a.Provenance(), b.Provenance()
	switch {
	case a.Recipe != b.Recipe:
		return fmt.Sprintf("not ranked: different models (%s vs %s)", a.Recipe, b.Recipe)
	case a.Cell.Gross == nil || b.Cell.Gross == nil:
		return "not ranked: a report has no µJ/token for this cell (no accepted tokens)"
	case pa != pb:
		why := "figures of different provenance measure different things and are never ranked against each other"
		if strings.Contains(pa+pb, "Estimator") {
			why = "an Estimator figure is the backend's configured µJ/token, not a measurement, and is never ranked against a metered one"
		}
		return fmt.Sprintf("not ranked: %s is %s, %s is %s: %s", a.Name, pa, b.Name, pb, why)
	case strings.HasPrefix(pa, "mixed"):
		return fmt.Sprintf("not ranked: each mixes provenances (%s)", pa)
	case pa == "Estimator":
		return "not ranked: both are Estimator figures (configured, not measured)"
	case a.Cell.GrossMedianBound == nil || b.Cell.GrossMedianBound == nil:
		return "not ranked: a figure carries no error bound"
	}
	ba, bb := a.Cell.GrossMedianBound, b.Cell.GrossMedianBound
	if ba.High >= bb.Low && bb.High >= ba.Low {
		return fmt.Sprintf("no significant difference: %s µJ/token in %s vs %s in %s (the bounds overlap)",
			a.Cell.Gross.Median, BoundText(ba), b.Cell.Gross.Median, BoundText(bb))
	}
	ma, mb := float64(a.Cell.Gross.Median), float64(b.Cell.Gross.Median)
	pct := 0.0
	if mb != 0 {
		pct = 100 * (mb - ma) / mb
	}
	return fmt.Sprintf("%s uses less: %s vs %s µJ/token (%.1f%% less; bounds %s and %s are disjoint)",
		a.Name, a.Cell.Gross.Median, b.Cell.Gross.Median, pct, BoundText(ba), BoundText(bb))
}

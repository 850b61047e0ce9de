package bench

// Compare: rank boards per cell only where the figures are comparable
// (PROFILE.md §20, §21).

import (
	"fmt"
	"math/big"
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
	// Incomplete says why the entry's run did not finish ("" when it
	// did): every verdict on it says so.
	Incomplete string
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
			Name: name, Board: v.Node.Label(), Recipe: v.Report.Body.Workload.Model.Resolved, Cell: c,
			Incomplete: IncompleteText(v.Report.Body.Status)})
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
	// Text is the rigorous verdict: meter bounds and run spread.
	Text string
	// Statistical is the separately labelled verdict of the statistical
	// uncertainty (x_stat_uj), "" where it does not apply: only ModelBased
	// figures of the same meter kind whose meter bounds overlap.
	Statistical string
}

// IncompleteText is how verdicts, tables and titles flag a run that did
// not finish: "" for a complete run.
func IncompleteText(s Status) string {
	if s.Complete {
		return ""
	}
	why := s.Incomplete
	if why == "" {
		why = "no reason given"
	}
	return "INCOMPLETE run: " + why
}

// Verdicts compares every pair of the cell's entries, the smaller median
// first.
func (c Comparison) Verdicts() []Verdict {
	es := append([]*Entry(nil), c.Entries...)
	sort.SliceStable(es, func(i, j int) bool { return medianOf(es[i]) < medianOf(es[j]) })
	var out []Verdict
	for i := 0; i < len(es); i++ {
		for j := i + 1; j < len(es); j++ {
			v := Verdict{A: es[i], B: es[j], Text: verdict(es[i], es[j]), Statistical: statVerdict(es[i], es[j])}
			if note := incompleteNote(es[i], es[j]); note != "" {
				v.Text += note
				if v.Statistical != "" {
					v.Statistical += note
				}
			}
			out = append(out, v)
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
	ca, cb := a.Cell.GrossMedianCI, b.Cell.GrossMedianCI
	boundsApart := ba.High < bb.Low || bb.High < ba.Low
	spreadApart := ca != nil && cb != nil && (ca.Hi < cb.Lo || cb.Hi < ca.Lo)
	bounds := fmt.Sprintf("meter bounds %s and %s", BoundText(ba), BoundText(bb))
	spread := fmt.Sprintf("run spreads (95 %% CIs of the median) %s and %s", CIText(ca), CIText(cb))
	if ca == nil || cb == nil {
		return fmt.Sprintf("not ranked: a figure states no run spread (95 %% CI of the median): %s", spread)
	}
	switch {
	case !boundsApart && !spreadApart:
		return fmt.Sprintf("no significant difference: %s µJ/token in %s vs %s in %s (neither separates them: the %s overlap, and so do the %s)",
			a.Cell.Gross.Median, BoundText(ba), b.Cell.Gross.Median, BoundText(bb), bounds, spread)
	case !boundsApart:
		return fmt.Sprintf("no significant difference: %s µJ/token in %s vs %s in %s (the meter bounds do not separate them: the %s overlap; the %s are apart)",
			a.Cell.Gross.Median, BoundText(ba), b.Cell.Gross.Median, BoundText(bb), bounds, spread)
	case !spreadApart:
		return fmt.Sprintf("no significant difference: %s µJ/token in %s vs %s in %s (the run spread does not separate them: the %s overlap; the %s are disjoint)",
			a.Cell.Gross.Median, BoundText(ba), b.Cell.Gross.Median, BoundText(bb), spread, bounds)
	}
	return fmt.Sprintf("%s uses less: %s vs %s µJ/token (%s less; %s are disjoint, and so are the %s)",
		a.Name, a.Cell.Gross.Median, b.Cell.Gross.Median, pctLess(a.Cell.Gross.Median, b.Cell.Gross.Median), bounds, spread)
}

// pctLess is how much less a is than b, in per cent of b.
func pctLess(a, b Milli) string {
	if b == 0 {
		return "0.0%"
	}
	return fmt.Sprintf("%.1f%%", 100*(float64(b)-float64(a))/float64(b))
}

// CIText is a median's confidence interval as tables print it, with the
// coverage it really has.
func CIText(c *MedianCI) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("[%s, %s] at %s %%", c.Lo, c.Hi, Milli(c.ConfidencePPM/10)) // ppm to per cent in thousandths, floor
}

// statVerdict ranks two ModelBased figures of one meter kind by their
// statistical uncertainty where the rigorous bounds cannot: "" where it
// does not apply. It claims a difference only when the medians differ by
// more than √(stat_a² + stat_b²) and the run spreads are apart too.
func statVerdict(a, b *Entry) string {
	if a.Recipe != b.Recipe || a.Cell.Gross == nil || b.Cell.Gross == nil ||
		a.Provenance() != "ModelBased" || b.Provenance() != "ModelBased" {
		return ""
	}
	ka, kb := sortedKeys(a.Cell.MeterKinds), sortedKeys(b.Cell.MeterKinds)
	if len(ka) != 1 || len(kb) != 1 || ka[0] != kb[0] {
		return ""
	}
	ba, bb := a.Cell.GrossMedianBound, b.Cell.GrossMedianBound
	if ba == nil || bb == nil || ba.High < bb.Low || bb.High < ba.Low {
		return "" // unbounded, or the rigorous verdict already ranks them
	}
	sa, sb := a.Cell.StatPerToken, b.Cell.StatPerToken
	if sa == nil || sb == nil {
		return "statistical (95 %): not ranked: a figure carries no statistical uncertainty (x_stat_uj)"
	}
	ma, mb := a.Cell.Gross.Median, b.Cell.Gross.Median
	d := new(big.Int).Abs(big.NewInt(int64(mb) - int64(ma)))
	d2 := new(big.Int).Mul(d, d)
	s2 := new(big.Int).Add(new(big.Int).Mul(big.NewInt(int64(*sa)), big.NewInt(int64(*sa))),
		new(big.Int).Mul(big.NewInt(int64(*sb)), big.NewInt(int64(*sb))))
	root := Milli(new(big.Int).Sqrt(s2).Int64()) // floor: the test below is exact
	ca, cb := a.Cell.GrossMedianCI, b.Cell.GrossMedianCI
	spreadApart := ca != nil && cb != nil && (ca.Hi < cb.Lo || cb.Hi < ca.Lo)
	switch {
	case d2.Cmp(s2) <= 0:
		return fmt.Sprintf("statistical (95 %%): no difference beyond the statistical uncertainty: |%s − %s| ≤ √(%s² + %s²) ≈ %s µJ/token (x_stat_uj, not a bound)",
			mb, ma, *sa, *sb, root)
	case !spreadApart:
		return fmt.Sprintf("statistical (95 %%): not ranked: the medians differ by %s µJ/token, beyond √(%s² + %s²) ≈ %s, but the run spreads %s and %s overlap",
			Milli(d.Int64()), *sa, *sb, root, CIText(ca), CIText(cb))
	}
	return fmt.Sprintf("statistical (95 %%): %s uses less by %s µJ/token (%s vs %s; beyond √(%s² + %s²) ≈ %s from x_stat_uj, and the run spreads %s and %s are apart; not a bound: the meter bounds overlap)",
		a.Name, Milli(d.Int64()), ma, mb, *sa, *sb, root, CIText(ca), CIText(cb))
}

// incompleteNote flags a verdict on an incomplete run's figure.
func incompleteNote(a, b *Entry) string {
	var parts []string
	for _, e := range []*Entry{a, b} {
		if e.Incomplete != "" {
			parts = append(parts, e.Name+": "+e.Incomplete)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, "; ") + "]"
}

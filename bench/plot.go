package bench

// Plot: pictures of verified reports (`meshctl bench plot`). The power
// trace is display data (PROFILE.md §20): it
// is drawn, never summarised.

import (
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"meshd/steward"
)

// seriesColors colour the data series, in order; tests look for them.
var seriesColors = []color.RGBA{
	{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}, // green
	{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, // purple
	{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}, // brown
}

var (
	windowShade = color.RGBA{R: 0xff, G: 0xe0, B: 0x99, A: 0xff} // the gross metered window
	serveShade  = color.RGBA{R: 0xff, G: 0xc2, B: 0x4d, A: 0xff} // the serve inside it
	idleColour  = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff}
	// the other receipts' windows in the whole run's trace, alternating
	// with windowShade so that adjacent windows are told apart.
	windowShade2 = color.RGBA{R: 0xc6, G: 0xdb, B: 0xef, A: 0xff}
	paretoColour = color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}
)

const plotW, plotH = 8 * vg.Inch, 5 * vg.Inch

// Plot writes every picture of the verified reports, named names (one
// each, distinct: they name the files), into dir as PNG and SVG: µJ per
// accepted token by board and by output length, and each report's power
// trace around a serve. It returns the files written and notes on what
// could not be drawn (a report without a trace).
func Plot(dir string, names []string, reps []*Verified) (files, notes []string, err error) {
	save := func(p *plot.Plot, base string) error {
		for _, ext := range []string{".png", ".svg"} {
			f := filepath.Join(dir, base+ext)
			if err := p.Save(plotW, plotH, f); err != nil {
				return fmt.Errorf("bench plot: writing %s: %w", f, err)
			}
			files = append(files, f)
		}
		return nil
	}
	p, err := boardPlot(names, reps)
	if err != nil {
		return nil, nil, err
	}
	if err := save(p, "uj_per_token_by_board"); err != nil {
		return nil, nil, err
	}
	if p, err = outputPlot(names, reps); err != nil {
		return nil, nil, err
	}
	if err := save(p, "uj_per_token_by_output"); err != nil {
		return nil, nil, err
	}
	p, ok, err := paretoPlot(names, reps)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		if err := save(p, "pareto_uj_per_token_vs_tokens_per_s"); err != nil {
			return nil, nil, err
		}
	} else {
		notes = append(notes, "no cell has both a µJ/token and a tokens/s median: no energy-vs-speed plot")
	}
	for i, v := range reps {
		p, err := tracePlot(names[i], v)
		if errors.Is(err, errNoTrace) {
			notes = append(notes, fmt.Sprintf("%s: no power trace to draw: %v", names[i], err))
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if err := save(p, "power_trace_"+names[i]); err != nil {
			return nil, nil, err
		}
		if p, err = runTracePlot(names[i], v); err != nil {
			return nil, nil, err
		}
		if err := save(p, "power_run_"+names[i]); err != nil {
			return nil, nil, err
		}
	}
	return files, notes, nil
}

// caption is the lines under a figure's title that say what it is of:
// per report its board, recipe, steward (short id), date and build, and
// an incomplete run flagged. More than maxCaption reports are counted.
func caption(names []string, reps []*Verified) string {
	const maxCaption = 4
	var lines []string
	for i, v := range reps {
		if i == maxCaption {
			lines = append(lines, fmt.Sprintf("(and %d more reports)", len(reps)-maxCaption))
			break
		}
		b := &v.Report.Body
		recipe := b.Workload.Model.Resolved
		if len(recipe) > 40 {
			recipe = recipe[:40] + "…"
		}
		line := fmt.Sprintf("%s: %s · %s · steward %s · %s · %s, meshd %s", names[i], v.Node.Label(), recipe, ShortID(b.Steward),
			time.UnixMilli(b.Status.StartedUnixMs).UTC().Format("2006-01-02"), b.Status.Harness, v.Node.Version)
		if note := IncompleteText(b.Status); note != "" {
			line += " · " + note
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// titled sets a figure's title: what it shows, then the caption.
func titled(p *plot.Plot, what string, names []string, reps []*Verified) {
	p.Title.Text = what + "\n" + caption(names, reps)
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.Legend.TextStyle.Font.Size = vg.Points(8)
}

// headroom raises the top of a µJ/token axis so the legend, drawn in the
// top right, sits above the data: half again on a linear axis, two
// decades on a log one.
func headroom(p *plot.Plot, logY bool) {
	if logY {
		p.Y.Max *= 100
		return
	}
	p.Y.Max *= 1.5
}

// Provenance glyphs: the shape says what the figure is, whatever its
// colour (PROFILE §20).
var provenanceGlyphs = map[string]draw.GlyphDrawer{
	"HwShunt":    draw.CircleGlyph{},
	"ModelBased": draw.TriangleGlyph{},
	"Estimator":  draw.BoxGlyph{},
}

// provenanceGlyph is the glyph of a cell's provenance; a mix is a ring.
func provenanceGlyph(prov string) draw.GlyphDrawer {
	if g, ok := provenanceGlyphs[prov]; ok {
		return g
	}
	return draw.RingGlyph{}
}

// thumb is a legend entry drawn by hand: a glyph or a line.
type thumb struct {
	glyph *draw.GlyphStyle
	line  *draw.LineStyle
}

func (t thumb) Thumbnail(c *draw.Canvas) {
	if t.glyph != nil {
		c.DrawGlyph(*t.glyph, c.Center())
		return
	}
	y := c.Center().Y
	c.StrokeLine2(*t.line, c.Min.X, y, c.Max.X, y)
}

// legendKey adds the legend of what shapes and bars mean: one glyph per
// provenance drawn, and the two kinds of bar.
func legendKey(p *plot.Plot, provs map[string]bool, bars bool) {
	for _, prov := range sortedKeys(provs) {
		g := draw.GlyphStyle{Color: color.Black, Radius: vg.Points(4), Shape: provenanceGlyph(prov)}
		p.Legend.Add(prov, thumb{glyph: &g})
	}
	if bars {
		b, c := boundStyle(color.RGBA{A: 0xff}), ciStyle(color.RGBA{A: 0xff})
		p.Legend.Add("meter bound on the median (thin, dashed)", thumb{line: &b})
		p.Legend.Add("95 % CI of the median: run spread (thick)", thumb{line: &c})
	}
}

func boundStyle(col color.RGBA) draw.LineStyle {
	return draw.LineStyle{Color: col, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(3), vg.Points(2)}}
}

func ciStyle(col color.RGBA) draw.LineStyle {
	return draw.LineStyle{Color: col, Width: vg.Points(3.5)}
}

// logRatio is how far a bound may reach above its median before the
// µJ/token axes go logarithmic: beyond it, a linear axis would show the
// bounds and flatten every median onto the floor.
const logRatio = 10

// needLogY decides the µJ/token axes: logarithmic when some cell's bound
// reaches more than logRatio times above its median.
func needLogY(cells []CellSummary) bool {
	for _, c := range cells {
		if c.Gross == nil || c.GrossMedianBound == nil || c.Gross.Median <= 0 {
			continue
		}
		if int64(c.GrossMedianBound.High) > logRatio*int64(c.Gross.Median) {
			return true
		}
	}
	return false
}

// allCells are the cells of every report.
func allCells(reps []*Verified) []CellSummary {
	var out []CellSummary
	for _, v := range reps {
		out = append(out, v.Report.Body.Summary.Cells...)
	}
	return out
}

// logFloor is the bottom of a log axis: a tenth of the smallest positive
// median or bound end, so nothing drawn sits at or below zero.
func logFloor(cells []CellSummary) float64 {
	least := 0.0
	consider := func(m Milli) {
		if v := float64(m) / 1000; v > 0 && (least == 0 || v < least) {
			least = v
		}
	}
	for _, c := range cells {
		if c.Gross != nil {
			consider(c.Gross.Median)
		}
		if c.GrossMedianBound != nil {
			consider(c.GrossMedianBound.Low)
		}
		if c.GrossMedianCI != nil {
			consider(c.GrossMedianCI.Lo)
		}
	}
	if least == 0 {
		return 0.001
	}
	return least / 10
}

// yAxis sets a µJ/token axis: linear from 0, or logarithmic from floor.
func yAxis(p *plot.Plot, logY bool, floor float64) {
	p.Y.Label.Text = "µJ / accepted token"
	if logY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Y.Min = floor
		p.Y.Label.Text += " (log)"
		return
	}
	p.Y.Min = 0
}

// pointsWithErrors is a series of points with asymmetric Y errors.
type pointsWithErrors struct {
	plotter.XYs
	plotter.YErrors
}

// cellPoint is one cell's median and the distances to its bound's ends
// (zero where the figure is unbounded), in µJ/token.
func cellPoint(c CellSummary) (y, lo, hi float64, ok bool) {
	if c.Gross == nil {
		return 0, 0, 0, false
	}
	y = float64(c.Gross.Median) / 1000
	if b := c.GrossMedianBound; b != nil {
		lo, hi = y-float64(b.Low)/1000, float64(b.High)/1000-y
	}
	return y, lo, hi, true
}

// cellCI is the distances from a cell's median to its CI's ends.
func cellCI(c CellSummary) (lo, hi float64) {
	if c.Gross == nil || c.GrossMedianCI == nil {
		return 0, 0
	}
	y := float64(c.Gross.Median) / 1000
	return y - float64(c.GrossMedianCI.Lo)/1000, float64(c.GrossMedianCI.Hi)/1000 - y
}

// cellSeries is one series of cells: the medians, their bounds and their
// CIs, and each point's provenance.
type cellSeries struct {
	bound pointsWithErrors
	ci    pointsWithErrors
	provs []string
}

// add appends cell c at x; on a log axis the ends below floor are cut at
// it (a log axis has no zero) and a median below it is left out.
func (s *cellSeries) add(x float64, c CellSummary, logY bool, floor float64) {
	y, lo, hi, ok := cellPoint(c)
	if !ok || logY && y < floor {
		return
	}
	clo, chi := cellCI(c)
	if logY {
		lo, clo = min(lo, y-floor), min(clo, y-floor)
	}
	s.bound.XYs = append(s.bound.XYs, plotter.XY{X: x, Y: y})
	s.bound.YErrors = append(s.bound.YErrors, struct{ Low, High float64 }{lo, hi})
	s.ci.XYs = append(s.ci.XYs, plotter.XY{X: x, Y: y})
	s.ci.YErrors = append(s.ci.YErrors, struct{ Low, High float64 }{clo, chi})
	s.provs = append(s.provs, ProvenanceText(c.Provenance))
}

// draw adds the series: the medians by provenance glyph, joined when
// asked, the bound thin and dashed, the CI thick beside it (shifted by
// ciShift in X so neither hides the other).
func (s *cellSeries) draw(p *plot.Plot, col color.RGBA, joined bool, legend string, ciShift float64) error {
	if len(s.bound.XYs) == 0 {
		return nil
	}
	eb, err := plotter.NewYErrorBars(s.bound)
	if err != nil {
		return err
	}
	eb.LineStyle = boundStyle(col)
	p.Add(eb)
	ci := pointsWithErrors{XYs: make(plotter.XYs, len(s.ci.XYs)), YErrors: s.ci.YErrors}
	for i, xy := range s.ci.XYs {
		ci.XYs[i] = plotter.XY{X: xy.X + ciShift, Y: xy.Y}
	}
	cb, err := plotter.NewYErrorBars(ci)
	if err != nil {
		return err
	}
	cb.LineStyle, cb.CapWidth = ciStyle(col), 0
	p.Add(cb)
	if joined && len(s.bound.XYs) > 1 {
		l, err := plotter.NewLine(s.bound.XYs)
		if err != nil {
			return err
		}
		l.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(1.5)}
		p.Add(l)
	}
	sc, err := plotter.NewScatter(s.bound.XYs)
	if err != nil {
		return err
	}
	sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	sc.GlyphStyleFunc = func(i int) draw.GlyphStyle {
		return draw.GlyphStyle{Color: col, Radius: vg.Points(4.5), Shape: provenanceGlyph(s.provs[i])}
	}
	p.Add(sc)
	line := draw.LineStyle{Color: col, Width: vg.Points(4)}
	p.Legend.Add(legend, thumb{line: &line})
	return nil
}

// boardPlot is µJ per accepted token per board, one series per cell:
// the median by provenance glyph, the meter's bound on it and the run's
// spread (the median's CI) drawn apart.
func boardPlot(names []string, reps []*Verified) (*plot.Plot, error) {
	p := plot.New()
	titled(p, "µJ per accepted token by board: median, meter bound, run spread", names, reps)
	cells := allCells(reps)
	logY, floor := needLogY(cells), logFloor(cells)
	yAxis(p, logY, floor)
	labels := make([]string, len(reps))
	series := map[Cell]*cellSeries{}
	provs := map[string]bool{}
	var order []Cell
	for _, v := range reps {
		for _, c := range v.Report.Body.Summary.Cells {
			if k := (Cell{c.PromptWords, c.MaxTokens}); series[k] == nil {
				series[k] = &cellSeries{}
				order = append(order, k)
			}
		}
	}
	// Spread the cells a little around each board so bars do not hide
	// each other.
	width := 0.5 / float64(max(len(order), 1))
	for i, v := range reps {
		labels[i] = names[i] + "\n" + v.Node.Label()
		for _, c := range v.Report.Body.Summary.Cells {
			k := Cell{c.PromptWords, c.MaxTokens}
			j := slices.Index(order, k)
			series[k].add(float64(i)+(float64(j)-float64(len(order)-1)/2)*width, c, logY, floor)
			if c.Gross != nil {
				provs[ProvenanceText(c.Provenance)] = true
			}
		}
	}
	for j, k := range order {
		if err := series[k].draw(p, seriesColors[j%len(seriesColors)], false, "prompt×output "+k.String(), width/4); err != nil {
			return nil, err
		}
	}
	legendKey(p, provs, true)
	p.NominalX(labels...)
	// Room around the boards and above the highest bar, so no point
	// sits on the frame.
	p.X.Min, p.X.Max = -0.5, float64(len(reps))-0.5
	headroom(p, logY)
	p.Legend.Top = true
	return p, nil
}

// outputPlot is µJ per accepted token against output length, one line
// per report and prompt length.
func outputPlot(names []string, reps []*Verified) (*plot.Plot, error) {
	p := plot.New()
	titled(p, "µJ per accepted token against output length: median, meter bound, run spread", names, reps)
	p.X.Label.Text = "output length (max_tokens)"
	cells := allCells(reps)
	logY, floor := needLogY(cells), logFloor(cells)
	yAxis(p, logY, floor)
	provs := map[string]bool{}
	shift := 0.0
	for _, c := range cells {
		shift = max(shift, float64(c.MaxTokens)/200)
	}
	n := 0
	for i, v := range reps {
		byPrompt := map[int][]CellSummary{}
		var prompts []int
		for _, c := range v.Report.Body.Summary.Cells {
			if c.Gross == nil {
				continue
			}
			if byPrompt[c.PromptWords] == nil {
				prompts = append(prompts, c.PromptWords)
			}
			byPrompt[c.PromptWords] = append(byPrompt[c.PromptWords], c)
			provs[ProvenanceText(c.Provenance)] = true
		}
		sort.Ints(prompts)
		for _, pw := range prompts {
			cs := byPrompt[pw]
			sort.Slice(cs, func(a, b int) bool { return cs[a].MaxTokens < cs[b].MaxTokens })
			s := &cellSeries{}
			for _, c := range cs {
				s.add(float64(c.MaxTokens), c, logY, floor)
			}
			if err := s.draw(p, seriesColors[n%len(seriesColors)], true, fmt.Sprintf("%s, prompt %d words", names[i], pw), shift); err != nil {
				return nil, err
			}
			n++
		}
	}
	legendKey(p, provs, true)
	pad := (p.X.Max - p.X.Min) * 0.05
	p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
	headroom(p, logY)
	p.Legend.Top = true
	return p, nil
}

// paretoPoint is one cell of one report on the energy-vs-speed plane.
type paretoPoint struct {
	TokensPerS, UJPerToken float64
}

// paretoFront is the indices of the points no other point beats: none
// has at least their tokens/s and at most their µJ/token with one of the
// two strictly better. In the order given.
func paretoFront(pts []paretoPoint) []int {
	var out []int
	for i, a := range pts {
		dominated := false
		for j, b := range pts {
			if i != j && b.TokensPerS >= a.TokensPerS && b.UJPerToken <= a.UJPerToken &&
				(b.TokensPerS > a.TokensPerS || b.UJPerToken < a.UJPerToken) {
				dominated = true
				break
			}
		}
		if !dominated {
			out = append(out, i)
		}
	}
	return out
}

// paretoPlot is every cell of every report as median µJ/token against
// median tokens/s, the Pareto front (faster and cheaper, not beaten on
// both) joined and ringed; false when no cell has both medians.
func paretoPlot(names []string, reps []*Verified) (*plot.Plot, bool, error) {
	p := plot.New()
	titled(p, "energy against speed: median µJ per accepted token vs median tokens/s per cell (Pareto fronts haloed)", names, reps)
	p.X.Label.Text = "tokens / s (median over the serves)"
	cells := allCells(reps)
	logY, floor := needLogY(cells), logFloor(cells)
	yAxis(p, logY, floor)
	var pts []paretoPoint
	var labels, ptProv []string
	provs := map[string]bool{}
	var data []plot.Plotter // drawn over the fronts' halos
	for i, v := range reps {
		var xys plotter.XYs
		var cprov []string
		for _, c := range v.Report.Body.Summary.Cells {
			if c.Gross == nil || c.TokensPerS == nil || logY && float64(c.Gross.Median)/1000 < floor {
				continue
			}
			pt := paretoPoint{float64(c.TokensPerS.Median) / 1000, float64(c.Gross.Median) / 1000}
			pts = append(pts, pt)
			labels = append(labels, names[i]+" "+Cell{c.PromptWords, c.MaxTokens}.String())
			xys = append(xys, plotter.XY{X: pt.TokensPerS, Y: pt.UJPerToken})
			prov := ProvenanceText(c.Provenance)
			cprov, ptProv = append(cprov, prov), append(ptProv, prov)
			provs[prov] = true
		}
		if len(xys) == 0 {
			continue
		}
		col := seriesColors[i%len(seriesColors)]
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, false, err
		}
		sc.GlyphStyleFunc = func(k int) draw.GlyphStyle {
			return draw.GlyphStyle{Color: col, Radius: vg.Points(4.5), Shape: provenanceGlyph(cprov[k])}
		}
		data = append(data, sc)
		line := draw.LineStyle{Color: col, Width: vg.Points(4)}
		p.Legend.Add(names[i], thumb{line: &line})
	}
	if len(pts) == 0 {
		return nil, false, nil
	}
	// A front within each provenance: figures of different provenance
	// measure different things and are never ranked against each other.
	var fxy plotter.XYs
	var flabels []string
	for _, prov := range sortedKeys(provs) {
		var idx []int
		var group []paretoPoint
		for i := range pts {
			if ptProv[i] == prov {
				idx, group = append(idx, i), append(group, pts[i])
			}
		}
		front := paretoFront(group)
		sort.Slice(front, func(a, b int) bool { return group[front[a]].TokensPerS < group[front[b]].TokensPerS })
		var line plotter.XYs
		for _, k := range front {
			i := idx[k]
			xy := plotter.XY{X: pts[i].TokensPerS, Y: pts[i].UJPerToken}
			line, fxy, flabels = append(line, xy), append(fxy, xy), append(flabels, labels[i])
		}
		if len(line) > 1 {
			l, err := plotter.NewLine(line)
			if err != nil {
				return nil, false, err
			}
			l.LineStyle = draw.LineStyle{Color: paretoColour, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(5), vg.Points(3)}}
			p.Add(l)
		}
	}
	halo, err := plotter.NewScatter(fxy)
	if err != nil {
		return nil, false, err
	}
	halo.GlyphStyle = draw.GlyphStyle{Color: paretoColour, Radius: vg.Points(8), Shape: draw.CircleGlyph{}}
	p.Add(halo)
	p.Add(data...)
	p.Legend.Add("Pareto front, within each provenance", halo)
	lab, err := plotter.NewLabels(plotter.XYLabels{XYs: fxy, Labels: flabels})
	if err != nil {
		return nil, false, err
	}
	for i := range lab.TextStyle {
		lab.TextStyle[i].Font.Size = vg.Points(8)
	}
	lab.Offset = vg.Point{X: vg.Points(8), Y: vg.Points(6)}
	p.Add(lab)
	legendKey(p, provs, false)
	padX := max((p.X.Max-p.X.Min)*0.2, 1) // the right eighth is the legend's
	p.X.Min, p.X.Max = max(p.X.Min-padX, 0), p.X.Max+padX
	headroom(p, logY)
	p.Legend.Top = true
	return p, true, nil
}

// errNoTrace marks a report with nothing to draw a power trace from.
var errNoTrace = errors.New("no trace")

// traceMeters are the meters whose power is summed for the trace: the
// run's backend's span, or every meter when the board section does not
// say.
func traceMeters(v *Verified) []string {
	for _, b := range v.Node.Backends {
		if b["name"] != v.Report.Body.Idle.Backend {
			continue
		}
		if ms, ok := b["meters"].([]any); ok && len(ms) > 0 {
			out := make([]string, 0, len(ms))
			for _, m := range ms {
				out = append(out, fmt.Sprint(m))
			}
			return out
		}
	}
	return nil
}

// spanPower is the summed power (µW) of meters at one trace sample, and
// whether every one of them had a reading.
func spanPower(meters []string, s map[string]uint64) (uint64, bool) {
	var sum uint64
	for _, m := range meters {
		v, ok := s[m]
		if !ok {
			return 0, false
		}
		sum += v
	}
	return sum, len(meters) > 0
}

// tracePlot is the power trace around one measured serve, with its
// metered window shaded and the idle baseline drawn. The window is placed
// by the receipt: it ends at x_sealed_unix_ms (sealing follows the window's
// close by the seal's own latency, so the placement is good to a few ms)
// and lasts x_window_ns; the serve is the last x_serve_ns of it.
// tracePt is one reading of the span's summed power.
type tracePt struct {
	ms int64
	uw uint64
}

// spanTrace is the trace of the run's span: the summed power at every
// sample where each of its meters had a reading.
func spanTrace(v *Verified) ([]tracePt, []string, error) {
	b := &v.Report.Body
	meters := traceMeters(v)
	if len(meters) == 0 && len(b.Trace.Samples) > 0 {
		for m := range b.Trace.Samples[0].Meters {
			meters = append(meters, m)
		}
		sort.Strings(meters)
	}
	var trace []tracePt
	for _, s := range b.Trace.Samples {
		readings := map[string]uint64{}
		for m, r := range s.Meters {
			if r.PowerUW != nil {
				readings[m] = *r.PowerUW
			}
		}
		if uw, ok := spanPower(meters, readings); ok {
			trace = append(trace, tracePt{s.TMs, uw})
		}
	}
	if len(trace) < 2 {
		return nil, nil, fmt.Errorf("%w: %d power readings of the span (%s) in the trace", errNoTrace, len(trace), strings.Join(meters, "+"))
	}
	return trace, meters, nil
}

// runTracePlot is the whole run's power trace with every measured
// receipt's metered window marked (placed as tracePlot places one), and
// the idle baseline.
func runTracePlot(name string, v *Verified) (*plot.Plot, error) {
	b := &v.Report.Body
	trace, meters, err := spanTrace(v)
	if err != nil {
		return nil, err
	}
	t0 := float64(trace[0].ms) / 1000
	var xys plotter.XYs
	ymax := 0.0
	for _, p := range trace {
		w := float64(p.uw) / 1e6
		xys = append(xys, plotter.XY{X: float64(p.ms)/1000 - t0, Y: w})
		ymax = max(ymax, w)
	}
	if b.Summary.IdleUW != nil {
		ymax = max(ymax, float64(*b.Summary.IdleUW)/1e6)
	}
	ymax = max(ymax*1.4, 0.001) // room for the legend
	p := plot.New()
	titled(p, fmt.Sprintf("%s: the whole run's power, each measured receipt's window shaded", name), []string{name}, []*Verified{v})
	p.X.Label.Text = "seconds from the trace's first reading (windows placed by x_sealed_unix_ms)"
	p.Y.Label.Text = "W (" + strings.Join(meters, "+") + ")"
	p.Y.Min, p.Y.Max = 0, ymax
	n := 0
	for _, s := range b.Serves {
		if s.Warmup {
			continue
		}
		o := v.Receipt(s.Sequence)
		if o == nil || o.Receipt.SealedUnixMs == nil || o.Receipt.WindowNs == nil {
			continue
		}
		end := float64(*o.Receipt.SealedUnixMs)/1000 - t0
		start := end - float64(*o.Receipt.WindowNs)/1e9
		poly, err := plotter.NewPolygon(plotter.XYs{{X: start, Y: 0}, {X: end, Y: 0}, {X: end, Y: ymax}, {X: start, Y: ymax}})
		if err != nil {
			return nil, err
		}
		poly.Color, poly.LineStyle.Width = windowShade, 0
		if n%2 == 1 {
			poly.Color = windowShade2
		}
		p.Add(poly)
		if n < 2 {
			p.Legend.Add(map[int]string{0: "a receipt's metered window (x_window_ns)", 1: "the next receipt's window"}[n], poly)
		}
		n++
	}
	if err := powerLines(p, xys, vg.Points(1.5), b.Summary.IdleUW, xys[0].X, xys[len(xys)-1].X); err != nil {
		return nil, err
	}
	return p, nil
}

// powerLines draws a trace plot's live power, xys, as a line of width,
// and the idle baseline, when the report has one, dashed from x0 to x1;
// the legend goes on top, above the readings.
func powerLines(p *plot.Plot, xys plotter.XYs, width vg.Length, idleUW *uint64, x0, x1 float64) error {
	line, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	line.LineStyle = draw.LineStyle{Color: seriesColors[0], Width: width}
	p.Add(line)
	p.Legend.Add("live power (display data)", line)
	if idleUW != nil {
		idle := float64(*idleUW) / 1e6
		il, err := plotter.NewLine(plotter.XYs{{X: x0, Y: idle}, {X: x1, Y: idle}})
		if err != nil {
			return err
		}
		il.LineStyle = draw.LineStyle{Color: idleColour, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(6), vg.Points(4)}}
		p.Add(il)
		p.Legend.Add("idle baseline", il)
	}
	p.Legend.Top = true
	return nil
}

func tracePlot(name string, v *Verified) (*plot.Plot, error) {
	b := &v.Report.Body
	trace, meters, err := spanTrace(v)
	if err != nil {
		return nil, err
	}
	// The serve to draw: the measured one with the most trace readings
	// around its window (the latest of equals).
	var best *steward.Receipt
	bestN := -1
	for _, s := range b.Serves {
		if s.Warmup {
			continue
		}
		r := v.Receipt(s.Sequence).Receipt
		if r.SealedUnixMs == nil || r.WindowNs == nil {
			continue
		}
		end := int64(*r.SealedUnixMs)
		start := end - int64(*r.WindowNs/1e6) - 1000
		n := 0
		for _, p := range trace {
			if p.ms >= start && p.ms <= end+1000 {
				n++
			}
		}
		if n >= bestN {
			best, bestN = r, n
		}
	}
	if best == nil || bestN < 2 {
		return nil, fmt.Errorf("%w: no measured serve has trace readings around its window", errNoTrace)
	}
	winEnd := float64(*best.SealedUnixMs) / 1000
	winStart := winEnd - float64(*best.WindowNs)/1e9
	serveStart := winEnd
	if best.ServeNs != nil {
		serveStart = winEnd - float64(*best.ServeNs)/1e9
	}
	margin := max(1.0, 2*(winEnd-winStart))
	from, to := winStart-margin, winEnd+margin
	var xys plotter.XYs
	ymax := 0.0
	for _, p := range trace {
		t := float64(p.ms) / 1000
		if t < from || t > to {
			continue
		}
		w := float64(p.uw) / 1e6
		xys = append(xys, plotter.XY{X: t - winStart, Y: w})
		ymax = max(ymax, w)
	}
	idle := 0.0
	if b.Summary.IdleUW != nil {
		idle = float64(*b.Summary.IdleUW) / 1e6
		ymax = max(ymax, idle)
	}
	ymax = max(ymax*1.15, 0.001)

	p := plot.New()
	titled(p, fmt.Sprintf("%s: power around receipt %d (%s)", name, best.Sequence, best.EnergyProvenance), []string{name}, []*Verified{v})
	p.X.Label.Text = "seconds from the metered window's start (placed by x_sealed_unix_ms)"
	p.Y.Label.Text = "W (" + strings.Join(meters, "+") + ")"
	p.Y.Min, p.Y.Max = 0, ymax
	p.X.Min, p.X.Max = from-winStart, to-winStart
	rect := func(x0, x1 float64, col color.RGBA, legend string) error {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			return err
		}
		poly.Color, poly.LineStyle.Width = col, 0
		p.Add(poly)
		p.Legend.Add(legend, poly)
		return nil
	}
	if err := rect(0, winEnd-winStart, windowShade, "metered window (x_window_ns)"); err != nil {
		return nil, err
	}
	if err := rect(serveStart-winStart, winEnd-winStart, serveShade, "serve (x_serve_ns)"); err != nil {
		return nil, err
	}
	if err := powerLines(p, xys, vg.Points(2), b.Summary.IdleUW, from-winStart, to-winStart); err != nil {
		return nil, err
	}
	return p, nil
}

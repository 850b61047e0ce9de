package bench

// Plot: pictures of verified reports (`meshctl bench plot`). The power
// trace is display data (PROFILE.md §20): it
// is drawn, never summarised.

import (
	"errors"
	"fmt"
	"image/color"
	"path/filepath"
	"sort"
	"strings"

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
	}
	return files, notes, nil
}

// pointsWithErrors is a series of points with asymmetric Y errors.
type pointsWithErrors struct {
	plotter.XYs
	plotter.YErrors
}

// addSeries adds a scatter (and line when joined) with error bars.
func addSeries(p *plot.Plot, pts pointsWithErrors, col color.RGBA, joined bool, legend string) error {
	if len(pts.XYs) == 0 {
		return nil
	}
	sc, err := plotter.NewScatter(pts.XYs)
	if err != nil {
		return err
	}
	sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	p.Add(sc)
	p.Legend.Add(legend, sc)
	if joined && len(pts.XYs) > 1 {
		l, err := plotter.NewLine(pts.XYs)
		if err != nil {
			return err
		}
		l.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(2)}
		p.Add(l)
	}
	eb, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return err
	}
	eb.LineStyle = draw.LineStyle{Color: col, Width: vg.Points(1.5)}
	p.Add(eb)
	return nil
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

// boardPlot is µJ per accepted token per board, one series per cell, with
// the bounds on the medians as error bars.
func boardPlot(names []string, reps []*Verified) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "µJ per accepted token by board (median, bound on the median)"
	p.Y.Label.Text = "µJ / accepted token"
	p.Y.Min = 0
	labels := make([]string, len(reps))
	series := map[Cell]*pointsWithErrors{}
	var order []Cell
	for i, v := range reps {
		labels[i] = names[i] + "\n" + v.Node.Label()
		for _, c := range v.Report.Body.Summary.Cells {
			k := Cell{c.PromptWords, c.MaxTokens}
			if series[k] == nil {
				series[k] = &pointsWithErrors{}
				order = append(order, k)
			}
			if y, lo, hi, ok := cellPoint(c); ok {
				s := series[k]
				s.XYs = append(s.XYs, plotter.XY{X: float64(i), Y: y})
				s.YErrors = append(s.YErrors, struct{ Low, High float64 }{lo, hi})
			}
		}
	}
	// Spread the cells a little around each board so bars do not hide
	// each other.
	for j, k := range order {
		s := series[k]
		for n := range s.XYs {
			s.XYs[n].X += (float64(j) - float64(len(order)-1)/2) * 0.25 / float64(max(len(order), 1))
		}
		if err := addSeries(p, *s, seriesColors[j%len(seriesColors)], false, "prompt×output "+k.String()); err != nil {
			return nil, err
		}
	}
	p.NominalX(labels...)
	// Room around the boards and above the highest bar, so no point
	// sits on the frame.
	p.X.Min, p.X.Max = -0.5, float64(len(reps))-0.5
	p.Y.Max *= 1.1
	p.Legend.Top = true
	return p, nil
}

// outputPlot is µJ per accepted token against output length, one line
// per report and prompt length.
func outputPlot(names []string, reps []*Verified) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "µJ per accepted token against output length"
	p.X.Label.Text = "output length (max_tokens)"
	p.Y.Label.Text = "µJ / accepted token"
	p.Y.Min = 0
	n := 0
	for i, v := range reps {
		byPrompt := map[int]*pointsWithErrors{}
		var prompts []int
		for _, c := range v.Report.Body.Summary.Cells {
			y, lo, hi, ok := cellPoint(c)
			if !ok {
				continue
			}
			s := byPrompt[c.PromptWords]
			if s == nil {
				s = &pointsWithErrors{}
				byPrompt[c.PromptWords] = s
				prompts = append(prompts, c.PromptWords)
			}
			s.XYs = append(s.XYs, plotter.XY{X: float64(c.MaxTokens), Y: y})
			s.YErrors = append(s.YErrors, struct{ Low, High float64 }{lo, hi})
		}
		sort.Ints(prompts)
		for _, pw := range prompts {
			s := byPrompt[pw]
			sort.Sort(byX{s})
			if err := addSeries(p, *s, seriesColors[n%len(seriesColors)], true, fmt.Sprintf("%s, prompt %d words", names[i], pw)); err != nil {
				return nil, err
			}
			n++
		}
	}
	pad := (p.X.Max - p.X.Min) * 0.05
	p.X.Min, p.X.Max = p.X.Min-pad, p.X.Max+pad
	p.Y.Max *= 1.1
	p.Legend.Top = true
	return p, nil
}

// byX sorts a series by X, keeping each point's errors with it.
type byX struct{ s *pointsWithErrors }

func (b byX) Len() int           { return len(b.s.XYs) }
func (b byX) Less(i, j int) bool { return b.s.XYs[i].X < b.s.XYs[j].X }
func (b byX) Swap(i, j int) {
	b.s.XYs[i], b.s.XYs[j] = b.s.XYs[j], b.s.XYs[i]
	b.s.YErrors[i], b.s.YErrors[j] = b.s.YErrors[j], b.s.YErrors[i]
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
func tracePlot(name string, v *Verified) (*plot.Plot, error) {
	b := &v.Report.Body
	meters := traceMeters(v)
	if len(meters) == 0 && len(b.Trace.Samples) > 0 {
		for m := range b.Trace.Samples[0].Meters {
			meters = append(meters, m)
		}
		sort.Strings(meters)
	}
	type pt struct {
		ms int64
		uw uint64
	}
	var trace []pt
	for _, s := range b.Trace.Samples {
		readings := map[string]uint64{}
		for m, r := range s.Meters {
			if r.PowerUW != nil {
				readings[m] = *r.PowerUW
			}
		}
		if uw, ok := spanPower(meters, readings); ok {
			trace = append(trace, pt{s.TMs, uw})
		}
	}
	if len(trace) < 2 {
		return nil, fmt.Errorf("%w: %d power readings of the span (%s) in the trace", errNoTrace, len(trace), strings.Join(meters, "+"))
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
	p.Title.Text = fmt.Sprintf("%s: power around receipt %d (%s)", name, best.Sequence, best.EnergyProvenance)
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
	line, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	line.LineStyle = draw.LineStyle{Color: seriesColors[0], Width: vg.Points(2)}
	p.Add(line)
	p.Legend.Add("live power (display data)", line)
	if b.Summary.IdleUW != nil {
		il, err := plotter.NewLine(plotter.XYs{{X: from - winStart, Y: idle}, {X: to - winStart, Y: idle}})
		if err != nil {
			return nil, err
		}
		il.LineStyle = draw.LineStyle{Color: idleColour, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(6), vg.Points(4)}}
		p.Add(il)
		p.Legend.Add("idle baseline", il)
	}
	p.Legend.Top = true
	return p, nil
}

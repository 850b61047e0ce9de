package main

// `meshctl bench`: run a workload into a signed report (bench_run.go),
// verify one (bench_verify.go), compare boards, plot and export. The
// report layout and its rules are in PROFILE.md §20.

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"meshd/cmd/internal/cli"
	"meshd/steward"
)

// maxReportFile bounds a report read from disk.
const maxReportFile = 1 << 30

const benchUsage = `usage:
  meshctl bench run -workload W [-addr A | -config meshd.toml] -o REPORT [-no-trace] [-progress auto|bar|lines|none]
  meshctl bench verify [-trust HEXKEY] REPORT
  meshctl bench compare REPORT...   (bench reports and fleet reports)
  meshctl bench plot -o DIR REPORT...
  meshctl bench csv -o DIR REPORT`

func cmdBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, benchUsage)
		return fmt.Errorf("%w: bench needs a subcommand (run, verify, compare, plot, csv)", errUsage)
	}
	switch args[0] {
	case "run":
		return benchRunCmd(ctx, args[1:], stdout, stderr)
	case "verify":
		return benchVerifyCmd(args[1:], stdout, stderr)
	case "compare":
		return benchCompareCmd(args[1:], stdout, stderr)
	case "plot":
		return benchPlotCmd(args[1:], stdout, stderr)
	case "csv":
		return benchCSVCmd(args[1:], stdout, stderr)
	}
	fmt.Fprintln(stderr, benchUsage)
	return fmt.Errorf("%w: unknown bench subcommand %q", errUsage, args[0])
}

func benchRunCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workload := fs.String("workload", "", "the workload file (TOML; see bench/README.md)")
	addr := addrFlag(fs)
	cfgPath := fs.String("config", "", "start meshd serve -config FILE for the run (the meshd next to meshctl, else on PATH) and stop it after; instead of -addr")
	out := fs.String("o", "", "the report file to write")
	noTrace := fs.Bool("no-trace", false, "do not record the power trace (display data for bench plot)")
	progress := fs.String("progress", "auto", "auto (a bar on a terminal, lines otherwise), bar, lines or none")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl bench run -workload W [-addr A | -config meshd.toml] -o REPORT")
		fmt.Fprintln(stderr, "Ctrl-C stops the run and still writes the report of the serves that finished, marked incomplete")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	addrSet := false
	fs.Visit(func(f *flag.Flag) { addrSet = addrSet || f.Name == "addr" })
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("%w: bench run takes no arguments (got %q)", errUsage, fs.Args())
	case *workload == "" || *out == "":
		fs.Usage()
		return fmt.Errorf("%w: bench run needs -workload and -o", errUsage)
	case addrSet && *cfgPath != "":
		return fmt.Errorf("%w: -addr and -config exclude each other (-config starts its own meshd)", errUsage)
	}
	w, err := loadWorkload(*workload)
	if err != nil {
		return err
	}
	var sink progressSink
	switch *progress {
	case "auto":
		if isTerminal(stderr) {
			sink = &barProgress{w: stderr}
		} else {
			sink = &lineProgress{w: stderr}
		}
	case "bar":
		sink = &barProgress{w: stderr}
	case "lines":
		sink = &lineProgress{w: stderr}
	case "none":
	default:
		return fmt.Errorf("%w: -progress %q: want auto, bar, lines or none", errUsage, *progress)
	}
	target := *addr
	var daemon *childDaemon
	if *cfgPath != "" {
		daemon, target, err = startDaemon(ctx, *cfgPath, *out+".meshd.log", stderr)
		if err != nil {
			return err
		}
	}
	c, err := dial(target)
	if err == nil {
		var rep *benchReport
		rep, err = runBench(ctx, runOptions{workload: w, client: c, out: *out, progress: sink, trace: !*noTrace})
		if rep != nil && (err == nil || errors.Is(err, errInterrupted) || rep.Body.Status.Incomplete != "") {
			fmt.Fprintf(stdout, "report written to %s\n", *out)
			printSummary(stdout, rep)
		}
		if errors.Is(err, errInterrupted) {
			err = fmt.Errorf("bench run interrupted: %s; the report keeps every finished serve and is marked incomplete", rep.Body.Status.Incomplete)
		}
	}
	if daemon != nil {
		if serr := daemon.stop(); serr != nil && err == nil {
			err = serr
		}
	}
	return err
}

// printSummary writes the report's summary table.
func printSummary(w io.Writer, rep *benchReport) {
	b := &rep.Body
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tN\tµJ/TOK MEDIAN\tIQR\tMIN..MAX\tMEDIAN BOUND\tNET µJ/TOK\tTOK/S\tPROVENANCE")
	for _, c := range b.Summary.Cells {
		med, iqr, rng := "-", "-", "-"
		if c.Gross != nil {
			med, iqr, rng = c.Gross.Median.String(), c.Gross.IQR.String(), c.Gross.Min.String()+".."+c.Gross.Max.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", benchCell{c.PromptWords, c.MaxTokens}, c.Serves, med, iqr, rng,
			boundText(c.GrossMedianBound), statMedian(c.Net), statMedian(c.TokensPerS), provenanceText(c.Provenance))
	}
	tw.Flush()
	if b.Summary.IdleUW != nil {
		fmt.Fprintf(w, "idle baseline: %s W (±%s W), subtracted over each receipt's gross window for NET\n",
			milli(*b.Summary.IdleUW/1000), milli((*b.Summary.IdleErrorUW+999)/1000))
	}
}

func boundText(b *interval) string {
	if b == nil {
		return "unbounded"
	}
	return "[" + b.Low.String() + ", " + b.High.String() + "]"
}

func statMedian(s *stats) string {
	if s == nil {
		return "-"
	}
	return s.Median.String()
}

// provenanceText is a cell's provenance: the one name when all agree,
// else the mix with counts.
func provenanceText(m map[string]int) string {
	keys := sortedKeys(m)
	if len(keys) == 1 {
		return keys[0]
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return "mixed(" + strings.Join(parts, ", ") + ")"
}

func benchVerifyCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trust := fs.String("trust", "", "the steward key (64 hex) the report must be signed with; default: the key it names, which proves only consistency")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl bench verify [-trust HEXKEY] REPORT")
		fmt.Fprintln(stderr, "exit status: 0 verified, 1 a problem (each named by its place), 2 usage")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: bench verify takes one report", errUsage)
	}
	var key ed25519.PublicKey
	if *trust != "" {
		k, err := steward.ParsePublicKey(*trust)
		if err != nil {
			return fmt.Errorf("%w: -trust: %v", errUsage, err)
		}
		key = k
	}
	path := fs.Arg(0)
	data, err := cli.ReadFileLimit(path, maxReportFile)
	if err != nil {
		return err
	}
	if reportKind(data) == fleetKind {
		// -trust then pins the operator, who signs a fleet report.
		return verifyFleetFile(path, data, key, stdout)
	}
	v, problems := checkReport(data, key)
	if len(problems) > 0 {
		fmt.Fprintf(stdout, "report %s: FAILED, %d problems:\n", path, len(problems))
		for _, p := range problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
		return damaged(fmt.Errorf("bench report %s does not verify: %s", path, problems[0]))
	}
	var b strings.Builder
	printVerified(&b, path, v)
	fmt.Fprint(stdout, b.String())
	if key == nil {
		fmt.Fprintln(stdout, "note: verified under the key the report names; pin the steward with -trust to know whose it is")
	}
	fmt.Fprintln(stdout, "OK")
	return nil
}

// loadVerified reads and verifies reports; compare, plot and csv work only
// from reports that verify, so a picture never shows an altered figure.
func loadVerified(paths []string) ([]*verifiedReport, error) {
	var out []*verifiedReport
	for _, p := range paths {
		data, err := cli.ReadFileLimit(p, maxReportFile)
		if err != nil {
			return nil, err
		}
		if reportKind(data) == fleetKind {
			return nil, fmt.Errorf("%w: %s is a fleet report: plot and csv draw a bench run's serves, idle windows and trace, which it does not have (bench verify and bench compare take it)", errUsage, p)
		}
		v, problems := checkReport(data, nil)
		if len(problems) > 0 {
			return nil, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
		}
		out = append(out, v)
	}
	return out, nil
}

// ---- compare ----

// cmpEntry is one report's figure for one cell.
type cmpEntry struct {
	name   string // the report, as named on the command line
	board  string
	recipe string
	cell   summaryCell
}

func (e *cmpEntry) provenance() string { return provenanceText(e.cell.Provenance) }

// cmpKey is what compare matches cells by: prompt×output in bench
// reports, backend/recipe in fleet reports (PROFILE §21).
type cmpKey struct {
	cell  benchCell
	fleet string // "backend/recipe"; empty for a bench cell
}

func (k cmpKey) String() string {
	if k.fleet != "" {
		return k.fleet
	}
	return k.cell.String()
}

// less orders bench cells first, by prompt then output, then fleet cells.
func (k cmpKey) less(o cmpKey) bool {
	if (k.fleet == "") != (o.fleet == "") {
		return k.fleet == ""
	}
	if k.fleet != o.fleet {
		return k.fleet < o.fleet
	}
	if k.cell.prompt != o.cell.prompt {
		return k.cell.prompt < o.cell.prompt
	}
	return k.cell.output < o.cell.output
}

// keyedEntry is an entry with the cell it is matched by.
type keyedEntry struct {
	key   cmpKey
	entry *cmpEntry
}

// loadCompared reads and verifies reports of either kind and returns their
// cells as compare matches them, and whether both kinds were given.
func loadCompared(paths []string) ([]keyedEntry, bool, error) {
	var out []keyedEntry
	names := reportNames(paths)
	kinds := map[bool]bool{}
	for i, p := range paths {
		data, err := cli.ReadFileLimit(p, maxReportFile)
		if err != nil {
			return nil, false, err
		}
		isFleet := reportKind(data) == fleetKind
		kinds[isFleet] = true
		if isFleet {
			fv, problems := checkFleetReport(data, nil)
			if len(problems) > 0 {
				return nil, false, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
			}
			out = append(out, fv.compareEntries(names[i])...)
			continue
		}
		v, problems := checkReport(data, nil)
		if len(problems) > 0 {
			return nil, false, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
		}
		for _, c := range v.rep.Body.Summary.Cells {
			out = append(out, keyedEntry{key: cmpKey{cell: benchCell{c.PromptWords, c.MaxTokens}},
				entry: &cmpEntry{name: names[i], board: v.node.label(), recipe: v.rep.Body.Workload.Model.Resolved, cell: c}})
		}
	}
	return out, len(kinds) == 2, nil
}

func benchCompareCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl bench compare REPORT...")
		fmt.Fprintln(stderr, "ranks boards per cell only where the figures are comparable: the same model, the same single provenance, both bounded; overlapping bounds are no significant difference")
		fmt.Fprintln(stderr, "bench reports match by prompt×output cell, fleet reports (meshctl fleet report) by backend/recipe, each board of a fleet report an entry")
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return fmt.Errorf("%w: bench compare needs reports", errUsage)
	}
	entries, mixed, err := loadCompared(fs.Args())
	if err != nil {
		return err
	}
	byCell := map[cmpKey][]*cmpEntry{}
	for _, e := range entries {
		byCell[e.key] = append(byCell[e.key], e.entry)
	}
	cells := make([]cmpKey, 0, len(byCell))
	for k := range byCell {
		cells = append(cells, k)
	}
	sort.Slice(cells, func(i, j int) bool { return cells[i].less(cells[j]) })
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tREPORT\tBOARD\tBACKEND/RECIPE\tµJ/TOK MEDIAN\tBOUND\tNET\tN\tPROVENANCE")
	for _, k := range cells {
		for _, e := range byCell[k] {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", k, e.name, e.board, backendRecipe(e), statMedian(e.cell.Gross),
				boundText(e.cell.GrossMedianBound), statMedian(e.cell.Net), e.cell.Counted, e.provenance())
		}
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	if mixed {
		fmt.Fprintln(stdout, "note: bench reports' cells are prompt×output and fleet reports' backend/recipe: a bench report and a fleet report share no cell")
	}
	for _, k := range cells {
		es := byCell[k]
		if len(es) < 2 {
			continue
		}
		sort.SliceStable(es, func(i, j int) bool { return medianOf(es[i]) < medianOf(es[j]) })
		for i := 0; i < len(es); i++ {
			for j := i + 1; j < len(es); j++ {
				fmt.Fprintf(stdout, "%s: %s vs %s: %s\n", k, es[i].name, es[j].name, verdict(es[i], es[j]))
			}
		}
	}
	return nil
}

func backendRecipe(e *cmpEntry) string {
	names := sortedKeys(e.cell.Backends)
	r := e.recipe
	if len(r) > 24 {
		r = r[:24] + "…"
	}
	return strings.Join(names, "+") + "/" + r
}

func medianOf(e *cmpEntry) int64 {
	if e.cell.Gross == nil {
		return 1<<63 - 1
	}
	return int64(e.cell.Gross.Median)
}

// verdict says how a's figure compares with b's (a's median is not the
// larger), or why the two are not ranked.
func verdict(a, b *cmpEntry) string {
	pa, pb := a.provenance(), b.provenance()
	switch {
	case a.recipe != b.recipe:
		return fmt.Sprintf("not ranked: different models (%s vs %s)", a.recipe, b.recipe)
	case a.cell.Gross == nil || b.cell.Gross == nil:
		return "not ranked: a report has no µJ/token for this cell (no accepted tokens)"
	case pa != pb:
		why := "figures of different provenance measure different things and are never ranked against each other"
		if strings.Contains(pa+pb, "Estimator") {
			why = "an Estimator figure is the backend's configured µJ/token, not a measurement, and is never ranked against a metered one"
		}
		return fmt.Sprintf("not ranked: %s is %s, %s is %s: %s", a.name, pa, b.name, pb, why)
	case strings.HasPrefix(pa, "mixed"):
		return fmt.Sprintf("not ranked: each mixes provenances (%s)", pa)
	case pa == "Estimator":
		return "not ranked: both are Estimator figures (configured, not measured)"
	case a.cell.GrossMedianBound == nil || b.cell.GrossMedianBound == nil:
		return "not ranked: a figure carries no error bound"
	}
	ba, bb := a.cell.GrossMedianBound, b.cell.GrossMedianBound
	if ba.High >= bb.Low && bb.High >= ba.Low {
		return fmt.Sprintf("no significant difference: %s µJ/token in %s vs %s in %s (the bounds overlap)",
			a.cell.Gross.Median, boundText(ba), b.cell.Gross.Median, boundText(bb))
	}
	ma, mb := float64(a.cell.Gross.Median), float64(b.cell.Gross.Median)
	pct := 0.0
	if mb != 0 {
		pct = 100 * (mb - ma) / mb
	}
	return fmt.Sprintf("%s uses less: %s vs %s µJ/token (%.1f%% less; bounds %s and %s are disjoint)",
		a.name, a.cell.Gross.Median, b.cell.Gross.Median, pct, boundText(ba), boundText(bb))
}

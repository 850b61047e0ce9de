package main

// `meshctl bench`: run a workload into a signed report, verify one,
// compare boards, plot and export. The report, its rules and every
// computation on it are package meshd/bench's (PROFILE.md §20); these
// commands parse flags, read and write files and print.

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"meshd/bench"
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
	if cli.IsHelp(args[0]) {
		fmt.Fprintln(stdout, benchUsage)
		return nil
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
		return flagError(err)
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
	w, err := bench.LoadWorkload(*workload)
	if err != nil {
		return err
	}
	var sink bench.Progress
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
	target := *addr.addr
	var daemon *childDaemon
	if *cfgPath != "" {
		daemon, target, err = startDaemon(ctx, *cfgPath, *out+".meshd.log", stderr)
		if err != nil {
			return err
		}
	}
	c, err := addr.dialAt(target)
	if err == nil {
		var rep *bench.Report
		rep, err = bench.Run(ctx, c, w, bench.Options{Progress: sink, Trace: !*noTrace})
		if rep != nil {
			if werr := bench.WriteFile(*out, rep); werr != nil {
				rep, err = nil, werr
			}
		}
		if rep != nil && (err == nil || errors.Is(err, bench.ErrInterrupted) || rep.Body.Status.Incomplete != "") {
			fmt.Fprintf(stdout, "report written to %s\n", *out)
			printSummary(stdout, rep)
		}
		if errors.Is(err, bench.ErrInterrupted) {
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
func printSummary(w io.Writer, rep *bench.Report) {
	b := &rep.Body
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if note := bench.IncompleteText(b.Status); note != "" {
		fmt.Fprintln(w, note+": the figures below are of the serves that were sealed")
	}
	fmt.Fprintln(tw, "CELL\tN\tµJ/TOK MEDIAN\tIQR\tMIN..MAX\tMEDIAN BOUND\tMEDIAN CI\tNET µJ/TOK\tTOK/S\tTTFT MS\tPROVENANCE")
	for _, c := range b.Summary.Cells {
		med, iqr, rng := "-", "-", "-"
		if c.Gross != nil {
			med, iqr, rng = c.Gross.Median.String(), c.Gross.IQR.String(), c.Gross.Min.String()+".."+c.Gross.Max.String()
		}
		ci := "-"
		if c.GrossMedianCI != nil {
			ci = bench.CIText(c.GrossMedianCI)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", bench.Cell{Prompt: c.PromptWords, Output: c.MaxTokens}, c.Serves, med, iqr, rng,
			bench.BoundText(c.GrossMedianBound), ci, statMedian(c.Net), statMedian(c.TokensPerS), statMedian(c.TTFTMs), bench.ProvenanceText(c.Provenance))
	}
	tw.Flush()
	if b.Summary.IdleUW != nil {
		fmt.Fprintf(w, "idle baseline: %s W (±%s W), subtracted over each receipt's gross window for NET\n",
			bench.Milli(*b.Summary.IdleUW/1000), bench.Milli((*b.Summary.IdleErrorUW+999)/1000))
	}
}

func statMedian(s *bench.Stats) string {
	if s == nil {
		return "-"
	}
	return s.Median.String()
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
		return flagError(err)
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
	if bench.Kind(data) == bench.FleetKind {
		// -trust then pins the operator, who signs a fleet report.
		return verifyFleetFile(path, data, key, stdout)
	}
	v, problems := bench.Verify(data, key)
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
func loadVerified(paths []string) ([]*bench.Verified, error) {
	var out []*bench.Verified
	for _, p := range paths {
		data, err := cli.ReadFileLimit(p, maxReportFile)
		if err != nil {
			return nil, err
		}
		if bench.Kind(data) == bench.FleetKind {
			return nil, fmt.Errorf("%w: %s is a fleet report: plot and csv draw a bench run's serves, idle windows and trace, which it does not have (bench verify and bench compare take it)", errUsage, p)
		}
		v, problems := bench.Verify(data, nil)
		if len(problems) > 0 {
			return nil, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
		}
		out = append(out, v)
	}
	return out, nil
}

// loadCompared reads and verifies reports of either kind and returns their
// cells as compare matches them, and whether both kinds were given.
func loadCompared(paths []string) ([]bench.Entry, bool, error) {
	var out []bench.Entry
	names := reportNames(paths)
	kinds := map[bool]bool{}
	for i, p := range paths {
		data, err := cli.ReadFileLimit(p, maxReportFile)
		if err != nil {
			return nil, false, err
		}
		isFleet := bench.Kind(data) == bench.FleetKind
		kinds[isFleet] = true
		if isFleet {
			fv, problems := bench.VerifyFleet(data, nil)
			if len(problems) > 0 {
				return nil, false, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
			}
			out = append(out, fv.Entries(names[i])...)
			continue
		}
		v, problems := bench.Verify(data, nil)
		if len(problems) > 0 {
			return nil, false, damaged(fmt.Errorf("%s does not verify (%d problems; run meshctl bench verify): %s", p, len(problems), problems[0]))
		}
		out = append(out, v.Entries(names[i])...)
	}
	return out, len(kinds) == 2, nil
}

func benchCompareCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: meshctl bench compare REPORT...")
		fmt.Fprintln(stderr, "ranks boards per cell only where the figures are comparable: the same model, the same single provenance, both bounded; only when both the meter bounds and the run spreads (95 % CIs of the median) are apart, else no significant difference")
		fmt.Fprintln(stderr, "ModelBased figures of one meter kind whose bounds overlap are also compared by their statistical uncertainty (x_stat_uj), on a separate line labelled statistical (95 %)")
		fmt.Fprintln(stderr, "bench reports match by prompt×output cell, fleet reports (meshctl fleet report) by backend/recipe, each board of a fleet report an entry")
	}
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return fmt.Errorf("%w: bench compare needs reports", errUsage)
	}
	entries, mixed, err := loadCompared(fs.Args())
	if err != nil {
		return err
	}
	cells := bench.Compare(entries)
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tREPORT\tBOARD\tBACKEND/RECIPE\tµJ/TOK MEDIAN\tBOUND\tMEDIAN CI\tNET\tN\tPROVENANCE\tRUN")
	for _, c := range cells {
		for _, e := range c.Entries {
			run := "complete"
			if e.Incomplete != "" {
				run = e.Incomplete
			}
			ci := "-"
			if e.Cell.GrossMedianCI != nil {
				ci = bench.CIText(e.Cell.GrossMedianCI)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", c.Key, e.Name, e.Board, backendRecipe(e), statMedian(e.Cell.Gross),
				bench.BoundText(e.Cell.GrossMedianBound), ci, statMedian(e.Cell.Net), e.Cell.Counted, e.Provenance(), run)
		}
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	if mixed {
		fmt.Fprintln(stdout, "note: bench reports' cells are prompt×output and fleet reports' backend/recipe: a bench report and a fleet report share no cell")
	}
	for _, c := range cells {
		for _, v := range c.Verdicts() {
			fmt.Fprintf(stdout, "%s: %s vs %s: %s\n", c.Key, v.A.Name, v.B.Name, v.Text)
			if v.Statistical != "" {
				// Its own line: never read as the rigorous verdict.
				fmt.Fprintf(stdout, "%s: %s vs %s: %s\n", c.Key, v.A.Name, v.B.Name, v.Statistical)
			}
		}
	}
	return nil
}

func backendRecipe(e *bench.Entry) string {
	names := slices.Sorted(maps.Keys(e.Cell.Backends))
	r := e.Recipe
	if len(r) > 24 {
		r = r[:24] + "…"
	}
	return strings.Join(names, "+") + "/" + r
}

// parseInterleaved parses flags that may come before or after the
// positional arguments ("bench plot A B -o DIR") and returns the
// positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func benchPlotCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("o", "", "the directory to write the PNG and SVG files into")
	paths, err := parseInterleaved(fs, args)
	if err != nil {
		return flagError(err)
	}
	if *dir == "" || len(paths) == 0 {
		fmt.Fprintln(stderr, "usage: meshctl bench plot REPORT... -o DIR")
		return fmt.Errorf("%w: bench plot needs reports and -o DIR", errUsage)
	}
	reps, err := loadVerified(paths)
	if err != nil {
		return err
	}
	names := reportNames(paths)
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("bench plot: %w", err)
	}
	files, notes, err := bench.Plot(*dir, names, reps)
	for _, n := range notes {
		fmt.Fprintln(stderr, "note: "+n)
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}

// reportNames labels reports by their file names, numbered where two
// share one, so no picture overwrites another's.
func reportNames(paths []string) []string {
	names := make([]string, len(paths))
	count := map[string]int{}
	for i, p := range paths {
		names[i] = strings.TrimSuffix(filepath.Base(p), filepath.Ext(p))
		count[names[i]]++
	}
	seen := map[string]int{}
	for i, n := range names {
		if count[n] > 1 {
			seen[n]++
			names[i] = fmt.Sprintf("%s-%d", n, seen[n])
		}
	}
	return names
}

// ---- csv ----

func benchCSVCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench csv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("o", "", "the directory to write summary.csv and receipts.csv into")
	paths, err := parseInterleaved(fs, args)
	if err != nil {
		return flagError(err)
	}
	if *dir == "" || len(paths) != 1 {
		fmt.Fprintln(stderr, "usage: meshctl bench csv REPORT -o DIR")
		return fmt.Errorf("%w: bench csv needs one report and -o DIR", errUsage)
	}
	reps, err := loadVerified(paths)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return fmt.Errorf("bench csv: %w", err)
	}
	files, err := bench.CSV(*dir, reps[0])
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}

// printVerified writes what a verified report proves.
func printVerified(w *strings.Builder, path string, v *bench.Verified) {
	b := &v.Report.Body
	warm := 0
	for _, s := range b.Serves {
		if s.Warmup {
			warm++
		}
	}
	status := "complete"
	if note := bench.IncompleteText(b.Status); note != "" {
		status = note
	}
	fmt.Fprintf(w, "report %s: workload %q, %d serves (%d warm-up), %s\n", path, b.Workload.Name, len(b.Serves), warm, status)
	fmt.Fprintf(w, "board: %s, meshd %s\n", v.Node.Label(), v.Node.Version)
	fmt.Fprintf(w, "steward: %s\n", b.Steward)
	if b.State != nil {
		fmt.Fprintf(w, "board state at open (sealed): %s\n", bench.StateLine(b.State.Open))
		fmt.Fprintf(w, "board state at close (sealed): %s\n", bench.StateLine(b.State.Close))
	}
	if n := len(v.Receipts); n > 0 {
		fmt.Fprintf(w, "chain: %d receipts, sequences %d..%d, every signature and link verified\n", n, b.Chain.First, b.Chain.First+uint64(n)-1)
	}
	if v.Checkpoint != nil {
		fmt.Fprintf(w, "checkpoint: count %d, head %s: anchors the last receipt\n", v.Checkpoint.Count, v.Checkpoint.Head)
	}
	fmt.Fprintf(w, "serves: every receipt answers its serve's request and names recipe %s\n", b.Workload.Model.Resolved)
	fmt.Fprintf(w, "summary: %d cells, every figure recomputed from the receipts\n", len(b.Summary.Cells))
	if !b.Status.Complete {
		fmt.Fprintf(w, "summary: of an %s\n", bench.IncompleteText(b.Status))
	}
	fmt.Fprintf(w, "digests: %d sections\n", len(b.Digests))
	if v.Open != nil && v.Close != nil {
		fmt.Fprintf(w, "run: opened at sequence %d by %q (%s), closed %s at sequence %d with %d of %d serves sealed; board, meters, workload and trace as sealed\n",
			b.Run.Open.Sequence, v.Open.Caller, v.Open.Harness, v.Close.Status, b.Run.Close.Sequence, v.Close.ServesSealed, v.Close.ServesDeclared)
		fmt.Fprintf(w, "idle: %d idle records of the run; other callers: %d receipts in the segment, in no figure\n", len(v.Close.Idle), b.Run.Others)
	}
}

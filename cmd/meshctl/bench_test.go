package main

// The bench commands' own tests: flags, what they print, exit codes, the
// daemon bench run starts. What the report says and how it is checked is
// tested in package meshd/bench.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/agent/api/apitest"
	"meshd/agent/api/client"
	"meshd/bench"
	"meshd/cmd/internal/cli"
)

// benchBackends are what the bench tests serve: the benchmarked backend
// at F2, and a cheaper F1 one the router prefers when the floor allows.
const benchBackends = `
[[backend]]
name = "ref-bench"
kind = "reference"
fidelity = 2
uj_per_token = 50
work = 64
%s
[[backend]]
name = "ref-cheap"
kind = "reference"
fidelity = 1
uj_per_token = 10
work = 8
`

// benchWorkload is a small workload on ref-bench.
const benchWorkload = `
name = "test"
[model]
reference_work = 64
backend = "ref-bench"
[request]
fidelity_floor = 2
joule_ceiling_uj = 10000000
[matrix]
prompt_words = [4, 16]
output_tokens = [8, 24]
repetitions = 3
warmup = 1
`

// benchReportFile runs the small workload against s and writes its report
// into dir as report.json.
func benchReportFile(t *testing.T, s *testStack, dir string) (string, *bench.Report) {
	t.Helper()
	w, err := bench.ParseWorkload([]byte(benchWorkload))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Run(context.Background(), c, w, bench.Options{})
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	path := filepath.Join(dir, "report.json")
	if err := bench.WriteFile(path, rep); err != nil {
		t.Fatal(err)
	}
	return path, rep
}

// TestBenchVerifyCommand checks what bench verify prints and its exit
// status: 0 and OK for a report that verifies (under the key it names or
// a pinned one), 1 and every problem for one that does not.
func TestBenchVerifyCommand(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	path, rep := benchReportFile(t, s, t.TempDir())
	out, errOut, err := meshctl(context.Background(), "bench", "verify", path)
	if err != nil {
		t.Fatalf("the report does not verify: %v\n%s%s", err, out, errOut)
	}
	if !strings.HasSuffix(out, "OK\n") || !strings.Contains(out, "every figure recomputed") || !strings.Contains(out, "pin the steward with -trust") {
		t.Fatalf("verify printed:\n%s", out)
	}
	// A pinned steward verifies; another key does not.
	if out, _, err := meshctl(context.Background(), "bench", "verify", "-trust", rep.Body.Steward, path); err != nil || strings.Contains(out, "pin the steward") {
		t.Fatalf("-trust with the steward: %v\n%s", err, out)
	}
	if out, _, err := meshctl(context.Background(), "bench", "verify", "-trust", strings.Repeat("ab", 32), path); err == nil || !strings.Contains(out, "steward:") {
		t.Fatalf("-trust with another key: %v\n%s", err, out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "altered.json")
	os.WriteFile(f, apitest.Alter(t, data, `"board":{`, `"cpu_model":"`, 1), 0o644)
	out, _, err = meshctl(context.Background(), "bench", "verify", f)
	var ee *cli.ExitError
	if err == nil || !strings.Contains(out, "FAILED") || !strings.Contains(out, "\n  board: the section was altered") || !errors.As(err, &ee) || ee.Code != exitDamaged {
		t.Fatalf("verify of an altered report: %v\n%s", err, out)
	}
}

// TestBenchCompareCommand checks compare's table, its verdict lines and
// that it refuses a report that does not verify.
func TestBenchCompareCommand(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	a, _ := benchReportFile(t, s, t.TempDir())
	b, _ := benchReportFile(t, s, t.TempDir())
	out, errOut, err := meshctl(context.Background(), "bench", "compare", a, b)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	// The two files share a name: compare numbers them in order.
	if !strings.Contains(out, "4×8: report-1 vs report-2: not ranked: both are Estimator figures") {
		t.Fatalf("two estimates were ranked:\n%s", out)
	}
	for _, row := range []string{"4×8", "16×24", "µJ/TOK MEDIAN", "BOUND", "PROVENANCE", "ref-bench/reference/v1:work=64"} {
		if !strings.Contains(out, row) {
			t.Errorf("the table lacks %q:\n%s", row, out)
		}
	}
	// A report that does not verify is not compared.
	data, _ := os.ReadFile(a)
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, apitest.Alter(t, data, `"board":`, `"cpu_model":"`, 1), 0o644)
	var ee *cli.ExitError
	if _, _, err := meshctl(context.Background(), "bench", "compare", a, bad); err == nil || !strings.Contains(err.Error(), "does not verify") || !errors.As(err, &ee) || ee.Code != exitDamaged {
		t.Fatalf("compare took an altered report: %v", err)
	}
}

// TestBenchPlotAndCSVCommands checks that plot and csv list the files
// they write, and that plot says why it draws no power trace.
func TestBenchPlotAndCSVCommands(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	path, rep := benchReportFile(t, s, t.TempDir())
	dir := t.TempDir()
	out, errOut, err := meshctl(context.Background(), "bench", "plot", path, "-o", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "note: report: no power trace to draw") {
		t.Errorf("an unmetered report's missing trace is not said:\n%s", errOut)
	}
	for _, f := range []string{"uj_per_token_by_board.png", "uj_per_token_by_board.svg", "uj_per_token_by_output.png", "uj_per_token_by_output.svg"} {
		if !strings.Contains(out, filepath.Join(dir, f)+"\n") {
			t.Errorf("plot did not list %s:\n%s", f, out)
		}
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	csvDir := t.TempDir()
	out, errOut, err = meshctl(context.Background(), "bench", "csv", "-o", csvDir, path)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	if want := filepath.Join(csvDir, "summary.csv") + "\n" + filepath.Join(csvDir, "receipts.csv") + "\n"; out != want {
		t.Errorf("csv printed %q, want %q", out, want)
	}
	rec, _ := os.ReadFile(filepath.Join(csvDir, "receipts.csv"))
	if got := strings.Count(string(rec), "\n"); got != 1+len(rep.Body.Chain.Envelopes) {
		t.Errorf("receipts.csv has %d lines, want a header and %d receipts", got, len(rep.Body.Chain.Envelopes))
	}
	// A fleet report has no serves to draw.
	fleet := filepath.Join(t.TempDir(), "fleet.json")
	os.WriteFile(fleet, []byte(`{"body":{"kind":"fleet"}}`+"\n"), 0o644)
	if _, _, err := meshctl(context.Background(), "bench", "plot", fleet, "-o", dir); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "is a fleet report") {
		t.Errorf("plot of a fleet report: %v", err)
	}
}

func TestBenchInterrupt(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	wf := filepath.Join(t.TempDir(), "long.toml")
	if err := os.WriteFile(wf, []byte(`
name = "long"
[model]
reference_work = 64
[request]
fidelity_floor = 2
joule_ceiling_uj = 10000000
[matrix]
prompt_words = [8]
output_tokens = [8]
repetitions = 5000
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "long.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	stdout, stderr := newLineBuffer(), newLineBuffer()
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"bench", "run", "-workload", wf, "-addr", s.addr, "-o", out, "-progress", "lines"}, stdout, stderr)
	}()
	stderr.waitFor(ctx, t, "five finished serves", func(s string) bool { return strings.Contains(s, "serve 5/5000 ") })
	interrupt() // Ctrl-C
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		t.Fatal("bench run did not stop when interrupted")
	}
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("an interrupted run ended with %v", err)
	}
	data, rerr := os.ReadFile(out)
	if rerr != nil {
		t.Fatalf("no report after the interruption: %v\n%s", rerr, stderr.String())
	}
	v, problems := bench.Verify(data, nil)
	if len(problems) > 0 {
		t.Fatalf("the interrupted report does not verify: %v", problems)
	}
	b := &v.Report.Body
	finished := strings.Count(stderr.String(), "\nserve ")
	// The serve in flight at the interruption may have been sealed (and
	// counted by the run-close) before its answer was read: the report
	// then holds it too.
	if b.Status.Complete || !strings.Contains(b.Status.Incomplete, "interrupted") || len(b.Serves) < 5 || len(b.Serves) < finished || len(b.Serves) > finished+1 {
		t.Fatalf("complete %v (%q), %d serves in the report, %d printed as finished", b.Status.Complete, b.Status.Incomplete, len(b.Serves), finished)
	}
	if b.Summary.Cells[0].Serves != len(b.Serves) {
		t.Fatalf("the summary counts %d serves of %d", b.Summary.Cells[0].Serves, len(b.Serves))
	}
	if !strings.Contains(stdout.String(), "report written to") {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "nope"},
		{"bench", "run", "-o", "x"},
		{"bench", "run", "-workload", "w", "-o", "x", "-addr", "a:1", "-config", "c"},
		{"bench", "verify"},
		{"bench", "compare"},
		{"bench", "plot", "r.json"},
		{"bench", "csv", "a", "b", "-o", "d"},
	} {
		if _, _, err := meshctl(context.Background(), args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestBenchRunStartsDaemon builds meshd and lets bench run start it from a
// config, wait for it to be ready and stop it after.
func TestBenchRunStartsDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshd")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "meshd"), "meshd/cmd/meshd").CombinedOutput(); err != nil {
		t.Fatalf("building meshd: %v\n%s", err, out)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "meshd.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("[steward]\nstate_dir = %q\n[listen]\ntcp = [%q]\n", filepath.Join(dir, "state"), addr)+fmt.Sprintf(benchBackends, "")), 0o644)
	wf := filepath.Join(dir, "w.toml")
	os.WriteFile(wf, []byte("name = \"d\"\n[model]\nreference_work = 64\n[request]\nfidelity_floor = 2\njoule_ceiling_uj = 10000000\n[matrix]\nprompt_words = [4]\noutput_tokens = [4]\nrepetitions = 2\n"), 0o644)
	out := filepath.Join(dir, "r.json")
	stdout, stderr, err := meshctl(context.Background(), "bench", "run", "-workload", wf, "-config", cfg, "-o", out, "-progress", "lines")
	if err != nil {
		log, _ := os.ReadFile(out + ".meshd.log")
		t.Fatalf("%v\n%s%s\nmeshd log:\n%s", err, stdout, stderr, log)
	}
	if !strings.Contains(stderr, "bench: started") {
		t.Errorf("stderr:\n%s", stderr)
	}
	// The daemon is gone: its port refuses.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("meshd still listens after the run")
	}
	if out, _, err := meshctl(context.Background(), "bench", "verify", out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

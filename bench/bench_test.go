package bench

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"image/png"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/agent/api/apitest"
	"meshd/agent/api/client"
	"meshd/agent/config"
	"meshd/agent/node"
	"meshd/drivers"
	"meshd/steward"
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

// meteredBench is benchBackends with ref-bench metered by a simulated
// INA228 under the kernel's hwmon driver: a sysfs tree whose hardware
// energy accumulator (energy1_input, µJ) advances at a steady 6 W. The
// chip is stepped by the driver's own clock: every time the driver reads
// the clock, the accumulator is rewritten to the energy at that instant,
// so each reading the driver takes is the chip's true state at its stamp
// whatever the scheduler does (a goroutine advancing it by the wall clock
// fell behind under CPU load, and a window then saw no energy at all).
// The returned options carry that sensor for startBenchStack.
func meteredBench(t *testing.T) (string, node.Options) {
	t.Helper()
	root := t.TempDir()
	rail := filepath.Join(root, "hwmon0")
	if err := os.MkdirAll(rail, 0o755); err != nil {
		t.Fatal(err)
	}
	const powerUW = 6_000_000 // 12 V × 0.5 A
	for name, v := range map[string]string{"name": "ina228", "in1_input": "12000", "curr1_input": "500",
		"power1_input": fmt.Sprint(powerUW), "update_interval": "20", "energy1_input": "1000000"} {
		if err := writeSysfs(root, rail, name, v); err != nil {
			t.Fatal(err)
		}
	}
	chip := &ina228Chip{t: t, root: root, rail: rail, powerUW: powerUW, start: time.Now()}
	opts := node.Options{OpenSensor: func(ctx context.Context, m config.Meter) (drivers.Sensor, error) {
		return node.OpenSensor(ctx, m, chip)
	}}
	return fmt.Sprintf("[metering]\non_meter_failure = \"estimate\"\n\n[[meter]]\nname = \"rail\"\ndriver = \"hwmon\"\nrail = \"hwmon0/ina228:1\"\nhwmon_root = %q\nshunt_uohm = 2000\n", root) +
		fmt.Sprintf(benchBackends, `meters = ["rail"]`), opts
}

// writeSysfs renames a value into place, so the driver never reads half
// of one.
func writeSysfs(root, rail, name, v string) error {
	tmp := filepath.Join(root, name+".tmp")
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(rail, name))
}

// ina228Chip is the simulated chip's accumulator, advanced to the
// instant of every clock read (drivers.Clock).
type ina228Chip struct {
	t          testing.TB
	root, rail string
	powerUW    uint64
	start      time.Time
	mu         sync.Mutex
	last       uint64
}

func (c *ina228Chip) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	uj := 1_000_000 + uint64(now.Sub(c.start).Microseconds())*c.powerUW/1_000_000
	if uj > c.last { // the accumulator never runs backwards
		c.last = uj
		if err := writeSysfs(c.root, c.rail, "energy1_input", fmt.Sprint(uj)); err != nil {
			c.t.Error(err)
		}
	}
	return now
}

func (c *ina228Chip) Sleep(ctx context.Context, d time.Duration) error {
	return drivers.System{}.Sleep(ctx, d)
}

// testStack is a node and its HTTP API on loopback, as `meshd serve`
// runs them.
type testStack struct {
	n    *node.Node
	srv  *httptest.Server
	addr string // host:port
}

func startStack(t *testing.T, extra string) *testStack {
	t.Helper()
	st := apitest.Start(t, extra, node.Options{})
	return &testStack{n: st.Node, srv: st.Server, addr: st.Addr}
}

// logged opens receipt seq from the node's own log.
func (s *testStack) logged(t *testing.T, seq uint64) *steward.Opened {
	t.Helper()
	return apitest.Logged(t, s.n, seq)
}

// joined is problems one a line, for failure messages.
func joined(problems []Problem) string {
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// verifyFile verifies the report at path.
func verifyFile(t *testing.T, path string, trust ed25519.PublicKey) (*Verified, []Problem) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Verify(data, trust)
}

// startBenchStack is startStack over apitest.StartBare: the node's
// context kept for the test's life (the meters sample under it), and no
// API metrics or live stream besides the serve path.
func startBenchStack(t testing.TB, extra string, opts ...node.Options) *testStack {
	t.Helper()
	var o node.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	st := apitest.StartBare(t, extra, o)
	return &testStack{n: st.Node, srv: st.Server, addr: st.Addr}
}

// testWorkload is a small workload on ref-bench.
func testWorkload(t *testing.T, extra string) *Workload {
	t.Helper()
	w, err := ParseWorkload([]byte(`
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
` + extra))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// runToFile runs w against s and writes the report, failing the test on
// any error.
func runToFile(t *testing.T, s *testStack, w *Workload, trace bool, p Progress) (string, *Report) {
	t.Helper()
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.json")
	rep, err := Run(context.Background(), c, w, Options{Trace: trace, Progress: p})
	if err != nil {
		t.Fatalf("bench run: %v", err)
	}
	if err := WriteFile(out, rep); err != nil {
		t.Fatal(err)
	}
	return out, rep
}

func TestWorkload(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	const base = "name = \"w\"\n[request]\nfidelity_floor = 1\njoule_ceiling_uj = 1000\n[matrix]\nprompt_words = [8]\noutput_tokens = [4]\nrepetitions = 2\n"
	synth := fmt.Sprintf("[model.synthetic]\nlayers = 1\ndim = 64\nheads = 2\nkv_heads = 1\nff = 128\nvocab = 300\nctx = 64\ntype = \"q8_0\"\nseed = 7\npath = %q\n", model)
	for _, tc := range []struct {
		name, toml string
		recipe     string // want, or "" for an error
		err        string
	}{
		{"reference", base + "[model]\nreference_work = 8\n", "reference/v1:work=8", ""},
		{"recipe", base + "[model]\nrecipe = \"gguf:abc\"\n", "gguf:abc", ""},
		{"synthetic", base + synth, "gguf:", ""},
		{"unknown key", base + "[model]\nreference_work = 8\nbakend = \"x\"\n", "", "bakend"},
		{"two models", base + "[model]\nreference_work = 8\nrecipe = \"x\"\n", "", "exactly one"},
		{"no model", base, "", "exactly one"},
		{"floor", strings.Replace(base, "fidelity_floor = 1", "fidelity_floor = 5", 1) + "[model]\nreference_work = 8\n", "", "fidelity_floor"},
		{"no ceiling", strings.Replace(base, "joule_ceiling_uj = 1000", "", 1) + "[model]\nreference_work = 8\n", "", "joule_ceiling_uj"},
		{"repeated length", strings.Replace(base, "[8]", "[8, 8]", 1) + "[model]\nreference_work = 8\n", "", "prompt_words"},
		{"no repetitions", strings.Replace(base, "repetitions = 2", "repetitions = 0", 1) + "[model]\nreference_work = 8\n", "", "repetitions"},
		{"idle too long", base + "[model]\nreference_work = 8\n[idle]\nbefore_seconds = 601\n", "", "idle"},
		{"wrong type", base + "[model]\nreference_work = \"eight\"\n", "", "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWorkload([]byte(tc.toml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(w.Model.Resolved, tc.recipe) || w.Matrix.Concurrency != 1 || w.Trace.IntervalMs != 200 {
				t.Fatalf("resolved %q (want %q), concurrency %d, trace %d", w.Model.Resolved, tc.recipe, w.Matrix.Concurrency, w.Trace.IntervalMs)
			}
		})
	}
	// The synthetic model was written where the daemon can serve it, and
	// its recipe is the recipe of that file.
	w, err := ParseWorkload([]byte(base + "[model]\ngguf = \"" + model + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseWorkload([]byte(base + synth))
	if err != nil {
		t.Fatal(err)
	}
	if w.Model.Resolved != s.Model.Resolved || len(w.Model.Resolved) != len("gguf:")+64 {
		t.Fatalf("the file's recipe %q, the synthetic model's %q", w.Model.Resolved, s.Model.Resolved)
	}
	// A different file at the path is refused rather than misnamed.
	if err := os.WriteFile(model, []byte("not this model"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseWorkload([]byte(base + synth)); err == nil || !strings.Contains(err.Error(), "not the model") {
		t.Fatalf("a foreign file at model.synthetic.path: %v", err)
	}
}

func TestShippedWorkloads(t *testing.T) {
	if _, err := LoadWorkload("smoke.toml"); err != nil {
		t.Fatal(err)
	}
	// standard.toml names the model file a board provides; all else in it
	// must check out.
	if _, err := LoadWorkload("standard.toml"); err != nil && !(errors.Is(err, os.ErrNotExist) && strings.Contains(err.Error(), "model.gguf")) {
		t.Fatal(err)
	}
}

func TestMilliAndQuantiles(t *testing.T) {
	for _, tc := range []struct {
		v    Milli
		text string
	}{{0, "0"}, {1, "0.001"}, {41500, "41.5"}, {-125, "-0.125"}, {12000, "12"}, {1234567, "1234.567"}} {
		b, _ := json.Marshal(tc.v)
		if string(b) != tc.text {
			t.Errorf("%d marshals as %s, want %s", tc.v, b, tc.text)
		}
		var back Milli
		if err := json.Unmarshal(b, &back); err != nil || back != tc.v {
			t.Errorf("%s reads back as %d (%v)", b, back, err)
		}
		// The written form is RFC 8785's, so the report is canonical.
		if c, err := canonicalJSON(tc.v); err != nil || string(c) != tc.text {
			t.Errorf("canonical form of %s: %s %v", tc.text, c, err)
		}
	}
	for _, bad := range []string{"1.2345", "1e3", "--1", ".5"} {
		var m Milli
		if json.Unmarshal([]byte(bad), &m) == nil {
			t.Errorf("%s read as a figure", bad)
		}
	}
	for _, tc := range []struct {
		xs          []int64
		q1, med, q3 int64
	}{
		{[]int64{5}, 5, 5, 5},
		{[]int64{1, 2}, 1, 1, 1},       // 1.25, 1.5, 1.75 floored
		{[]int64{1, 2, 3, 4}, 1, 2, 3}, // 1.75, 2.5, 3.25
		{[]int64{10, 20, 30, 40, 50}, 20, 30, 40},
		{[]int64{-3, -1}, -3, -2, -2}, // -2.5, -2, -1.5: floor toward −∞
	} {
		s := statsOf(tc.xs)
		if int64(s.Q1) != tc.q1 || int64(s.Median) != tc.med || int64(s.Q3) != tc.q3 || s.IQR != s.Q3-s.Q1 {
			t.Errorf("%v: q1 %d median %d q3 %d, want %d %d %d", tc.xs, s.Q1, s.Median, s.Q3, tc.q1, tc.med, tc.q3)
		}
	}
	if b := medianBound([]int64{1, 2}, []int64{3, 4}); b.Low != 1 || b.High != 4 {
		t.Errorf("median bound %+v, want [1, 4] (rounded outward from 1.5 and 3.5)", b)
	}
}

// TestPerToken checks one receipt's figures against hand arithmetic.
func TestPerToken(t *testing.T) {
	u64 := func(v uint64) *uint64 { return &v }
	r := &steward.Receipt{EnergyProvenance: "HwShunt", MeasuredUJ: u64(10_000), EstimatedUJ: 9000, TokensAccepted: 3,
		ErrorUJ: u64(100), WindowNs: u64(500_000_000)}
	idle, idleErr := uint64(2_000_000), uint64(10_000) // 2 W ± 10 mW
	s, ok := perToken(r, &idle, &idleErr)
	if !ok {
		t.Fatal("no figures")
	}
	// gross 10000/3 = 3333.333…; bound (10000 ± 100)/3.
	// net: idle over 0.5 s is 1 J = 1 000 000 µJ > the serve: negative.
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"gross", s.gross, 3333333}, {"gross low", s.grossLo, 3300000}, {"gross high", s.grossHi, 3366667},
		{"net", s.net, -330_000_000},
		{"error per token", s.errPerTok, 33334},
		// net bound: ±(100 + 0.01 W × 0.5 s = 5000 µJ) = ±5100 µJ.
		{"net low", s.netLo, -331_700_000}, {"net high", s.netHi, -328_300_000},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.name, c.got, c.want)
		}
	}
}

func TestRunVerify(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	// Another client serves while the run does: its receipts land in the
	// segment between the run's and must be enclosed for the links.
	other, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	var interleaved atomic.Int32
	p := &hookProgress{onServed: func(n int) {
		if n%3 == 0 {
			if _, err := other.Serve(context.Background(), client.ServeRequest{Prompt: "someone else", MaxTokens: 2}); err != nil {
				t.Errorf("the other client: %v", err)
			}
			interleaved.Add(1)
		}
	}}
	w := testWorkload(t, "")
	path, rep := runToFile(t, s, w, false, p)
	v, problems := verifyFile(t, path, nil)
	if len(problems) > 0 {
		t.Fatalf("the report does not verify:\n%s", joined(problems))
	}
	if len(v.Receipts) != len(rep.Body.Chain.Envelopes) || v.Checkpoint == nil || v.Open == nil || v.Close == nil || v.Close.Status != steward.RunComplete {
		t.Fatalf("verified: %d receipts of %d, checkpoint %v, run-open %+v, run-close %+v", len(v.Receipts), len(rep.Body.Chain.Envelopes), v.Checkpoint, v.Open, v.Close)
	}
	b := &rep.Body
	if !b.Status.Complete || len(b.Serves) != 1+4*3 {
		t.Fatalf("complete %v, %d serves, want 13", b.Status.Complete, len(b.Serves))
	}
	// The run-open, the serves, the run-close and the other client's.
	if got, want := len(b.Chain.Envelopes), 2+len(b.Serves)+int(interleaved.Load()); got != want || b.Run.Others != int(interleaved.Load()) || b.Run.Others == 0 {
		t.Fatalf("segment of %d envelopes (%d others), want the run's %d and the other client's %d", got, b.Run.Others, 2+len(b.Serves), interleaved.Load())
	}
	// The summary is the receipts' own figures: the reference engine is
	// deterministic, so every serve of a cell charges the same.
	for _, c := range b.Summary.Cells {
		var want *steward.Receipt
		for _, sv := range b.Serves {
			if !sv.Warmup && sv.PromptWords == c.PromptWords && sv.MaxTokens == c.MaxTokens {
				want = s.logged(t, sv.Sequence).Receipt
			}
		}
		e, _ := want.Energy()
		if c.Serves != 3 || c.Counted != 3 || int64(c.Gross.Median) != int64(e.UJ())*1000/int64(want.TokensAccepted) ||
			c.Gross.IQR != 0 || c.Provenance["Estimator"] != 3 || c.Backends["ref-bench"] != 3 || c.GrossMedianBound != nil {
			t.Errorf("cell %d×%d: %+v; receipt charges %d µJ for %d tokens", c.PromptWords, c.MaxTokens, c, e.UJ(), want.TokensAccepted)
		}
		if c.TokensPerS == nil || c.TokensPerS.Median <= 0 {
			t.Errorf("cell %d×%d: no tokens/s", c.PromptWords, c.MaxTokens)
		}
		// Three repetitions: the median's interval is their range, at the
		// 75 % it really has (1 − 2/8).
		if ci := c.GrossMedianCI; ci == nil || ci.Rank != 1 || ci.ConfidencePPM != 750_000 || ci.Lo != c.Gross.Min || ci.Hi != c.Gross.Max {
			t.Errorf("cell %d×%d: median CI %+v of %+v", c.PromptWords, c.MaxTokens, ci, c.Gross)
		}
		// The reference engine emits token by token: the daemon timed the
		// first piece of every serve, within the serve.
		if c.TTFTMs == nil || c.TTFTMs.Max < c.TTFTMs.Min || c.StatPerToken != nil || c.MeterKinds["estimator"] != 3 {
			t.Errorf("cell %d×%d: ttft %+v, stat %v, meter kinds %v", c.PromptWords, c.MaxTokens, c.TTFTMs, c.StatPerToken, c.MeterKinds)
		}
	}
	for _, sv := range b.Serves {
		r := s.logged(t, sv.Sequence).Receipt
		if r.FirstTokenNs == nil || *r.FirstTokenNs > *r.ServeNs {
			t.Errorf("serve %d: x_first_token_ns %v of x_serve_ns %d", sv.Index, r.FirstTokenNs, *r.ServeNs)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || bytes.Count(data, []byte("\n")) != 1 {
		t.Fatal("the report is not one canonical line")
	}
	// A pinned steward verifies; another key does not.
	key, err := steward.ParsePublicKey(b.Steward)
	if err != nil {
		t.Fatal(err)
	}
	if _, problems := verifyFile(t, path, key); len(problems) > 0 {
		t.Fatalf("trusting the steward: %s", joined(problems))
	}
	other32, _ := steward.ParsePublicKey(strings.Repeat("ab", 32))
	if _, problems := verifyFile(t, path, other32); len(problems) != 1 || problems[0].Place != "steward" {
		t.Fatalf("trusting another key: %s", joined(problems))
	}
}

// hookProgress calls onServed after each serve (synchronously, from the
// serve's goroutine).
type hookProgress struct {
	quietProgress
	onServed func(n int)
}

func (h *hookProgress) Served(n int, _ Serve, _ *steward.Receipt) { h.onServed(n) }

func TestVerifyNamesTheAlteredPlace(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	path, rep := runToFile(t, s, testWorkload(t, ""), false, nil)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The fourth envelope's sequence, for the message.
	seq3 := rep.Body.Chain.First + 3
	env3 := rep.Body.Chain.Envelopes[3]
	for _, tc := range []struct {
		name  string
		data  []byte
		place string // the first problem must begin with it
	}{
		{"an envelope", apitest.Alter(t, data, env3, env3[:40], 0), fmt.Sprintf("chain.envelopes[3] (receipt sequence %d)", seq3)},
		{"an envelope's signature", apitest.Alter(t, data, env3, env3[:len(env3)-8], 0), fmt.Sprintf("chain.envelopes[3] (receipt sequence %d)", seq3)},
		{"a summary figure", apitest.Alter(t, data, `"summary":{`, `"gross_uj_per_token":{"iqr":0,"max":`, 0), "summary cell 4×8 (summary.cells[0]) gross_uj_per_token.max"},
		{"a summary figure in the third cell", apitest.AlterNth(t, data, `"summary":{`, `"gross_uj_per_token":{"iqr":0,"max":`, 2, 0), "summary cell 16×8 (summary.cells[2]) gross_uj_per_token.max"},
		{"a median's confidence interval", apitest.Alter(t, data, `"summary":{`, `"gross_median_ci":{"confidence_ppm":`, 0), "summary cell 4×8 (summary.cells[0]) gross_median_ci.confidence_ppm"},
		{"a time to first token", apitest.Alter(t, data, `"summary":{`, `"ttft_ms":{"iqr":`, 0), "summary cell 4×8 (summary.cells[0]) ttft_ms.iqr"},
		{"the board section", apitest.Alter(t, data, `"board":{`, `"cpu_model":"`, 1), "board: is not what the steward sealed at run open"},
		{"the workload", apitest.Alter(t, data, `"workload":{`, `"name":"`, 1), "run.open (receipt sequence 0): binds workload SHA-256"},
		{"the trace note", apitest.Alter(t, data, `"trace":{`, `"note":"`, 2), "trace: its SHA-256 is"},
		{"a serve's sequence", apitest.Alter(t, data, `"serves":[`, `"sequence":`, 0), "serves[0] (serve 0, 4×8 warm-up 0)"},
		{"the checkpoint", apitest.Alter(t, data, `"checkpoint":"`, "", 30), "chain.checkpoint:"},
		{"the JSON", apitest.Alter(t, data, `"format":`, "", 0), "file: not a bench report at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if bytes.Equal(tc.data, data) {
				t.Fatal("nothing was altered")
			}
			_, problems := Verify(tc.data, nil)
			if len(problems) == 0 {
				t.Fatal("an altered report verifies")
			}
			if !strings.HasPrefix(problems[0].String(), tc.place) {
				t.Fatalf("first problem %q, want it to name %q; all:\n%s", problems[0], tc.place, joined(problems))
			}
		})
	}
}

func TestCompare(t *testing.T) {
	// An unmetered board (Estimator) and a metered one.
	est := startStack(t, fmt.Sprintf(benchBackends, ""))
	met := meteredStack(t)
	w := testWorkload(t, "[idle]\nbefore_seconds = 0.2\nafter_seconds = 0.2\n")
	a, _ := runToFile(t, est, w, false, nil)
	b, rb := runToFile(t, met, w, false, nil)
	a2, _ := runToFile(t, est, w, false, nil)
	prov := ProvenanceText(rb.Body.Summary.Cells[0].Provenance)
	if prov != "ModelBased" {
		t.Fatalf("the simulated INA228's receipts are %s, want ModelBased", prov)
	}
	var entries []Entry
	for i, path := range []string{a, b, a2} {
		v, problems := verifyFile(t, path, nil)
		if len(problems) > 0 {
			t.Fatalf("%s: %s", path, joined(problems))
		}
		entries = append(entries, v.Entries(fmt.Sprintf("report-%d", i+1))...)
	}
	var out strings.Builder
	cells := Compare(entries)
	for _, c := range cells {
		for _, v := range c.Verdicts() {
			fmt.Fprintf(&out, "%s: %s vs %s: %s\n", c.Key, v.A.Name, v.B.Name, v.Text)
		}
	}
	// The metered board's figure is never ranked against the estimate.
	if !strings.Contains(out.String(), "4×8: report-1 vs report-2: not ranked: report-1 is Estimator, report-2 is ModelBased") ||
		!strings.Contains(out.String(), "an Estimator figure is the backend's configured µJ/token, not a measurement") {
		t.Fatalf("compare ranked an Estimator figure against a metered one:\n%s", out.String())
	}
	// Two Estimator boards: still not ranked, and said why.
	if !strings.Contains(out.String(), "not ranked: both are Estimator figures") {
		t.Fatalf("two estimates were ranked:\n%s", out.String())
	}
	// Every cell, in order, each with the three reports.
	var keys []string
	for _, c := range cells {
		keys = append(keys, c.Key.String())
		if len(c.Entries) != 3 || c.Entries[0].Name != "report-1" || c.Entries[2].Name != "report-3" {
			t.Errorf("cell %s: %d entries", c.Key, len(c.Entries))
		}
	}
	if got := strings.Join(keys, " "); got != "4×8 4×24 16×8 16×24" {
		t.Errorf("cells %s, want 4×8 4×24 16×8 16×24", got)
	}
}

func TestVerdicts(t *testing.T) {
	// A cell whose median µJ/token is med, its meter bound [lo, hi] and
	// its run spread (the median's 95 % CI) [clo, chi] (in thousandths).
	type fig struct{ med, lo, hi, clo, chi int64 }
	entry := func(name, recipe, prov string, f fig, bounded bool) *Entry {
		c := CellSummary{Gross: &Stats{Median: Milli(f.med)}, Provenance: map[string]int{prov: 6},
			GrossMedianCI: &MedianCI{Lo: Milli(f.clo), Hi: Milli(f.chi), Rank: 1, ConfidencePPM: 968_750}}
		if bounded {
			c.GrossMedianBound = &Interval{Low: Milli(f.lo), High: Milli(f.hi)}
		}
		return &Entry{Name: name, Recipe: recipe, Cell: c}
	}
	narrow := func(med int64) fig { return fig{med, med - 1e3, med + 1e3, med - 500, med + 500} }
	for _, tc := range []struct {
		name string
		a, b *Entry
		want string
	}{
		{"estimator vs hardware", entry("a", "r", "Estimator", narrow(40e3), false), entry("b", "r", "HwShunt", narrow(50e3), true),
			"not ranked: a is Estimator, b is HwShunt: an Estimator figure is the backend's configured µJ/token, not a measurement"},
		{"model vs hardware", entry("a", "r", "ModelBased", fig{40e3, 30e3, 50e3, 39e3, 41e3}, true), entry("b", "r", "HwShunt", narrow(50e3), true),
			"not ranked: a is ModelBased, b is HwShunt: figures of different provenance"},
		{"different models", entry("a", "r1", "HwShunt", narrow(40e3), true), entry("b", "r2", "HwShunt", narrow(50e3), true),
			"not ranked: different models"},
		{"bounds overlap, spreads too", entry("a", "r", "HwShunt", fig{40e3, 38e3, 45e3, 39e3, 44e3}, true), entry("b", "r", "HwShunt", fig{44e3, 43e3, 46e3, 43e3, 45e3}, true),
			"no significant difference: 40 µJ/token in [38, 45] vs 44 in [43, 46] (neither separates them: the meter bounds [38, 45] and [43, 46] overlap, and so do the run spreads (95 % CIs of the median) [39, 44] at 96.875 % and [43, 45] at 96.875 %)"},
		{"bounds touch, spreads apart", entry("a", "r", "HwShunt", fig{40e3, 38e3, 43e3, 39e3, 41e3}, true), entry("b", "r", "HwShunt", fig{44e3, 43e3, 46e3, 43e3, 45e3}, true),
			"no significant difference: 40 µJ/token in [38, 43] vs 44 in [43, 46] (the meter bounds do not separate them"},
		{"bounds apart, spreads overlap", entry("a", "r", "HwShunt", fig{40e3, 39e3, 41e3, 35e3, 49e3}, true), entry("b", "r", "HwShunt", fig{50e3, 49e3, 51e3, 48e3, 52e3}, true),
			"no significant difference: 40 µJ/token in [39, 41] vs 50 in [49, 51] (the run spread does not separate them: the run spreads (95 % CIs of the median) [35, 49] at 96.875 % and [48, 52] at 96.875 % overlap; the meter bounds [39, 41] and [49, 51] are disjoint)"},
		{"both apart", entry("a", "r", "HwShunt", narrow(40e3), true), entry("b", "r", "HwShunt", narrow(50e3), true),
			"a uses less: 40 vs 50 µJ/token (20.0% less; meter bounds [39, 41] and [49, 51] are disjoint, and so are the run spreads (95 % CIs of the median) [39.5, 40.5] at 96.875 % and [49.5, 50.5] at 96.875 %)"},
		{"no spread", entry("a", "r", "HwShunt", narrow(40e3), true), &Entry{Name: "b", Recipe: "r", Cell: CellSummary{Gross: &Stats{Median: 50e3},
			Provenance: map[string]int{"HwShunt": 1}, GrossMedianBound: &Interval{Low: 49e3, High: 51e3}}},
			"not ranked: a figure states no run spread"},
		{"unbounded", entry("a", "r", "ModelBased", narrow(40e3), false), entry("b", "r", "ModelBased", narrow(50e3), true),
			"not ranked: a figure carries no error bound"},
		{"mixed", &Entry{Name: "a", Recipe: "r", Cell: CellSummary{Gross: &Stats{}, Provenance: map[string]int{"HwShunt": 2, "ModelBased": 1}}},
			&Entry{Name: "b", Recipe: "r", Cell: CellSummary{Gross: &Stats{}, Provenance: map[string]int{"HwShunt": 2, "ModelBased": 1}}},
			"not ranked: each mixes provenances"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdict(tc.a, tc.b); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("verdict %q, want %q", got, tc.want)
			}
		})
	}
}

// Point meters' ModelBased figures whose rigorous bounds overlap are
// ranked, beside the rigorous verdict and labelled, by their statistical
// uncertainty: only when the medians differ by more than √(sa² + sb²) and
// the run spreads are apart; never across meter kinds or provenances.
func TestStatisticalVerdicts(t *testing.T) {
	m := func(v int64) *Milli { x := Milli(v); return &x }
	entry := func(name, prov, kind string, med, clo, chi int64, stat *Milli) *Entry {
		return &Entry{Name: name, Recipe: "r", Cell: CellSummary{Gross: &Stats{Median: Milli(med)},
			Provenance: map[string]int{prov: 8}, MeterKinds: map[string]int{kind: 8},
			GrossMedianBound: &Interval{Low: Milli(med - 200e3), High: Milli(med + 200e3)}, // a hwmon rail's bound: 20× the figure
			GrossMedianCI:    &MedianCI{Lo: Milli(clo), Hi: Milli(chi), Rank: 1, ConfidencePPM: 992_187}, StatPerToken: stat}}
	}
	for _, tc := range []struct {
		name string
		a, b *Entry
		want string // "" for no statistical verdict
	}{
		// |Δ| = 1000 > √(300² + 400²) = 500, spreads apart.
		{"ranked", entry("a", "ModelBased", "point", 10e3, 9.8e3, 10.2e3, m(300)), entry("b", "ModelBased", "point", 11e3, 10.8e3, 11.2e3, m(400)),
			"statistical (95 %): a uses less by 1 µJ/token (10 vs 11; beyond √(0.3² + 0.4²) ≈ 0.5 from x_stat_uj"},
		// |Δ| = 500 = √(300² + 400²): not beyond.
		{"at the uncertainty", entry("a", "ModelBased", "point", 10e3, 9.9e3, 10.1e3, m(300)), entry("b", "ModelBased", "point", 10.5e3, 10.4e3, 10.6e3, m(400)),
			"statistical (95 %): no difference beyond the statistical uncertainty: |10.5 − 10| ≤ √(0.3² + 0.4²) ≈ 0.5 µJ/token"},
		{"spreads overlap", entry("a", "ModelBased", "point", 10e3, 9e3, 11.5e3, m(300)), entry("b", "ModelBased", "point", 11e3, 10.8e3, 11.2e3, m(400)),
			"statistical (95 %): not ranked: the medians differ by 1 µJ/token, beyond √(0.3² + 0.4²) ≈ 0.5, but the run spreads"},
		{"no x_stat_uj", entry("a", "ModelBased", "point", 10e3, 9.8e3, 10.2e3, nil), entry("b", "ModelBased", "point", 11e3, 10.8e3, 11.2e3, m(400)),
			"statistical (95 %): not ranked: a figure carries no statistical uncertainty"},
		{"different kinds", entry("a", "ModelBased", "point", 10e3, 9.8e3, 10.2e3, m(300)), entry("b", "ModelBased", "adc", 11e3, 10.8e3, 11.2e3, m(400)), ""},
		{"hardware", entry("a", "HwShunt", "adc", 10e3, 9.8e3, 10.2e3, m(300)), entry("b", "HwShunt", "adc", 11e3, 10.8e3, 11.2e3, m(400)), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := statVerdict(tc.a, tc.b)
			if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
				t.Fatalf("statistical verdict %q, want %q", got, tc.want)
			}
			// The rigorous verdict is never the statistical one.
			if r := verdict(tc.a, tc.b); strings.Contains(r, "statistical") || strings.Contains(r, "uses less") {
				t.Fatalf("rigorous verdict %q ranks on overlapping bounds", r)
			}
		})
	}
	// The verdicts of a comparison carry both, and an incomplete run is
	// flagged in each.
	a := entry("a", "ModelBased", "point", 10e3, 9.8e3, 10.2e3, m(300))
	b := entry("b", "ModelBased", "point", 11e3, 10.8e3, 11.2e3, m(400))
	b.Incomplete = "INCOMPLETE run: interrupted"
	vs := Comparison{Entries: []*Entry{b, a}}.Verdicts()
	if len(vs) != 1 || vs[0].A != a || !strings.HasPrefix(vs[0].Text, "no significant difference") ||
		!strings.HasPrefix(vs[0].Statistical, "statistical (95 %): a uses less") ||
		!strings.HasSuffix(vs[0].Text, "[b: INCOMPLETE run: interrupted]") || !strings.HasSuffix(vs[0].Statistical, "[b: INCOMPLETE run: interrupted]") {
		t.Fatalf("verdicts %+v", vs)
	}
}

// colourPixels counts the pixels of the PNG at path that are exactly col,
// leaving out the right eighth of the image, where the legend draws each
// series' glyph: what is counted is data drawn in the plot.
func colourPixels(t *testing.T, path string, col color.RGBA) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Min.X+b.Dx()*7/8; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if uint8(r>>8) == col.R && uint8(g>>8) == col.G && uint8(bl>>8) == col.B {
				n++
			}
		}
	}
	return n
}

func TestPlotsAndCSV(t *testing.T) {
	w := testWorkload(t, "[idle]\nbefore_seconds = 0.2\nafter_seconds = 0.2\n[trace]\ninterval_ms = 50\n")
	// The unmetered board's figures differ from cell to cell (the
	// configured µJ/token over different token counts): every series is
	// visible. The metered board has the power trace.
	est, _ := runToFile(t, startStack(t, fmt.Sprintf(benchBackends, "")), w, true, nil)
	met, rep := runToFile(t, meteredStack(t), w, true, nil)
	if len(rep.Body.Trace.Samples) < 2 || !strings.HasPrefix(rep.Body.Trace.Note, "display data, not evidence") {
		t.Fatalf("trace: %d samples, note %q", len(rep.Body.Trace.Samples), rep.Body.Trace.Note)
	}
	// The simulated rail draws a steady 6 W, serving or not: nearly all
	// of each charge is idle power, which the net figure subtracts.
	c := rep.Body.Summary.Cells[0]
	if rep.Body.Summary.IdleUW == nil || c.Net == nil || c.Gross == nil || c.GrossMedianBound == nil ||
		abs(int64(c.Net.Median))*10 > int64(c.Gross.Median) || c.Provenance["Estimator"] != 0 {
		t.Fatalf("idle %v, cell %+v: want a bounded metered figure whose net is under a tenth of the gross", rep.Body.Summary.IdleUW, c)
	}
	estDir, metDir := t.TempDir(), t.TempDir()
	plotOf := func(path, dir string) (files, notes []string) {
		v, problems := verifyFile(t, path, nil)
		if len(problems) > 0 {
			t.Fatal(joined(problems))
		}
		files, notes, err := Plot(dir, []string{"report"}, []*Verified{v})
		if err != nil {
			t.Fatal(err)
		}
		return files, notes
	}
	files, notes := plotOf(est, estDir)
	if len(notes) != 1 || !strings.Contains(notes[0], "no power trace to draw") {
		t.Errorf("an unmetered report's missing trace is not said: %q", notes)
	}
	files2, _ := plotOf(met, metDir)
	out := strings.Join(append(files, files2...), "\n")
	for _, tc := range []struct {
		file string
		col  color.RGBA
		min  int
	}{
		// Four cells: each series drawn in its colour.
		{filepath.Join(estDir, "uj_per_token_by_board.png"), seriesColors[0], 40},
		{filepath.Join(estDir, "uj_per_token_by_board.png"), seriesColors[3], 40},
		{filepath.Join(estDir, "uj_per_token_by_output.png"), seriesColors[0], 300},
		{filepath.Join(estDir, "uj_per_token_by_output.png"), seriesColors[1], 300},
		// The power line and the shaded window. The line's length follows
		// the trace's timing (how far its samples spread across the axis,
		// how much the windows' shading covers): 150 pixels is a line
		// across the plot, several times the legend's swatch alone.
		{filepath.Join(metDir, "power_trace_report.png"), seriesColors[0], 150},
		{filepath.Join(metDir, "power_trace_report.png"), windowShade, 1000},
		{filepath.Join(metDir, "power_trace_report.png"), idleColour, 100},
	} {
		if !strings.Contains(out, tc.file) {
			t.Fatalf("plot did not list %s:\n%s", tc.file, out)
		}
		if n := colourPixels(t, tc.file, tc.col); n < tc.min {
			t.Errorf("%s: %d pixels of the series colour %v, want at least %d: the data is not drawn", tc.file, n, tc.col, tc.min)
		}
		svg, err := os.ReadFile(strings.TrimSuffix(tc.file, ".png") + ".svg")
		if err != nil || !bytes.Contains(svg, []byte("<svg")) || len(svg) < 2000 {
			t.Errorf("%s: the SVG is missing or empty (%v)", tc.file, err)
		}
	}
	// Every figure of both reports is written, as a PNG of the set size
	// and an SVG: the energy-vs-speed plot, the whole run's trace.
	for _, f := range []string{
		filepath.Join(estDir, "pareto_uj_per_token_vs_tokens_per_s.png"), filepath.Join(metDir, "pareto_uj_per_token_vs_tokens_per_s.png"),
		filepath.Join(metDir, "power_run_report.png"), filepath.Join(metDir, "uj_per_token_by_board.png"),
	} {
		if !strings.Contains(out, f) {
			t.Fatalf("plot did not list %s:\n%s", f, out)
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(fh)
		fh.Close()
		if err != nil || cfg.Width < 700 || cfg.Height < 400 || cfg.Width*5 != cfg.Height*8 {
			t.Errorf("%s: %v, %d×%d: not an 8×5 picture", f, err, cfg.Width, cfg.Height)
		}
	}
	// The whole run's trace marks the measured receipts' windows in two
	// alternating shades.
	if n := colourPixels(t, filepath.Join(metDir, "power_run_report.png"), windowShade2); n < 100 {
		t.Errorf("power_run: %d pixels of the second window shade", n)
	}
	if n := colourPixels(t, filepath.Join(estDir, "pareto_uj_per_token_vs_tokens_per_s.png"), paretoColour); n < 100 { // one halo at least: a front is never empty
		t.Errorf("pareto: %d pixels of the front's colour", n)
	}
	// An axis-only picture has none of the series colours.
	if n := colourPixels(t, filepath.Join(estDir, "uj_per_token_by_board.png"), seriesColors[5]); n != 0 {
		t.Errorf("%d pixels of an unused series colour", n)
	}

	csvDir := t.TempDir()
	v, _ := verifyFile(t, met, nil)
	if files, err := CSV(csvDir, v); err != nil || len(files) != 2 {
		t.Fatalf("csv: %v %q", err, files)
	}
	sum, _ := os.ReadFile(filepath.Join(csvDir, "summary.csv"))
	rec, _ := os.ReadFile(filepath.Join(csvDir, "receipts.csv"))
	if got := strings.Count(string(sum), "\n"); got != 1+4 {
		t.Errorf("summary.csv has %d lines, want a header and 4 cells:\n%s", got, sum)
	}
	if !strings.Contains(string(sum), c.Gross.Median.String()) {
		t.Errorf("summary.csv lacks the first cell's median %s:\n%s", c.Gross.Median, sum)
	}
	if got := strings.Count(string(rec), "\n"); got != 1+len(rep.Body.Chain.Envelopes) {
		t.Errorf("receipts.csv has %d lines, want a header and %d receipts", got, len(rep.Body.Chain.Envelopes))
	}
	if !strings.Contains(string(rec), rep.Body.Chain.Envelopes[0]) {
		t.Error("receipts.csv does not carry the envelopes")
	}
	rows, err := csv.NewReader(bytes.NewReader(sum)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	first := rows[1]
	for name, want := range map[string]string{
		"gross_ci_low": c.GrossMedianCI.Lo.String(), "gross_ci_high": c.GrossMedianCI.Hi.String(),
		"gross_ci_confidence_ppm": fmt.Sprint(c.GrossMedianCI.ConfidencePPM), "ttft_ms_median": c.TTFTMs.Median.String(),
		"run": "complete", "meter_kinds": ProvenanceText(c.MeterKinds),
	} {
		if i, ok := col[name]; !ok || first[i] != want {
			t.Errorf("summary.csv %s: %q, want %q", name, first[min(i, len(first)-1)], want)
		}
	}
	rrows, err := csv.NewReader(bytes.NewReader(rec)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// The chain opens with the run-open record, which serves nothing: the
	// first serve's row carries the time to first token.
	fi, si := slices.Index(rrows[0], "first_token_ns"), slices.Index(rrows[0], "serve")
	if fi < 0 || si < 0 {
		t.Fatalf("receipts.csv has no first_token_ns or serve column: %q", rrows[0])
	}
	served := 0
	for _, row := range rrows[1:] {
		if row[si] == "" {
			if row[fi] != "" {
				t.Errorf("a record's row carries first_token_ns %q: %q", row[fi], row)
			}
			continue
		}
		served++
		if row[fi] == "" {
			t.Errorf("serve %s has no first_token_ns: %q", row[si], row)
		}
	}
	if served == 0 {
		t.Error("receipts.csv lists no serve")
	}
}

// The µJ/token axes go logarithmic when a bound reaches more than ten
// times above its median, and only then.
func TestNeedLogY(t *testing.T) {
	cell := func(med, hi int64) CellSummary {
		return CellSummary{Gross: &Stats{Median: Milli(med)}, GrossMedianBound: &Interval{Low: 0, High: Milli(hi)}}
	}
	for _, tc := range []struct {
		name  string
		cells []CellSummary
		want  bool
	}{
		{"a shunt's bound", []CellSummary{cell(40e3, 41e3)}, false},
		{"exactly ten times", []CellSummary{cell(4e3, 40e3)}, false},
		{"a hwmon rail's bound, 20×", []CellSummary{cell(40e3, 41e3), cell(4e3, 80e3)}, true},
		{"unbounded", []CellSummary{{Gross: &Stats{Median: 5}}}, false},
		{"no figure", []CellSummary{{}}, false},
	} {
		if got := needLogY(tc.cells); got != tc.want {
			t.Errorf("%s: log axis %v, want %v", tc.name, got, tc.want)
		}
	}
	if f := logFloor([]CellSummary{cell(4e3, 80e3), cell(40e3, 41e3)}); f != 0.4 {
		t.Errorf("log floor %v, want a tenth of the least positive median, 0.4", f)
	}
}

// The Pareto front is the cells nothing beats on both speed and energy.
func TestParetoFront(t *testing.T) {
	pts := []paretoPoint{
		{10, 50}, // beaten by {20, 40}
		{20, 40},
		{30, 45}, // faster than {20, 40}, dearer: on the front
		{5, 30},  // cheapest: on the front
		{30, 46}, // beaten by {30, 45} on energy at equal speed
		{20, 40}, // equal to another: neither beats the other
	}
	if got := paretoFront(pts); !slices.Equal(got, []int{1, 2, 3, 5}) {
		t.Fatalf("front %v, want [1 2 3 5]", got)
	}
	if got := paretoFront(nil); len(got) != 0 {
		t.Fatalf("front of nothing: %v", got)
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

func TestRunRefusals(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	c, _ := client.New(s.addr)
	for _, tc := range []struct {
		name, extra, model, want string
		floor                    int
	}{
		{"unknown recipe", "", "reference_work = 65", "no backend of this meshd serves recipe reference/v1:work=65", 2},
		{"wrong backend", "", "reference_work = 64\nbackend = \"ref-cheap\"", "model.backend \"ref-cheap\" does not serve", 2},
		// Floor 1 lets the router pick the cheaper backend: the first
		// receipt names another recipe and the run stops, saying so.
		{"router picks another", "", "reference_work = 64", "the router chose another backend", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseWorkload([]byte(fmt.Sprintf("name = \"r\"\n[model]\n%s\n[request]\nfidelity_floor = %d\njoule_ceiling_uj = 10000000\n[matrix]\nprompt_words = [4]\noutput_tokens = [4]\nrepetitions = 2\n", tc.model, tc.floor)))
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), c, w, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if rep != nil {
				// A stopped run still reports, incomplete, and verifies.
				data, err := Encode(rep)
				if err != nil {
					t.Fatal(err)
				}
				if _, problems := Verify(data, nil); len(problems) > 0 || rep.Body.Status.Complete {
					t.Fatalf("the stopped run's report: complete %v, problems %v", rep.Body.Status.Complete, problems)
				}
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	w := testWorkload(t, "")
	w.Matrix.Concurrency = 3
	path, rep := runToFile(t, s, w, false, nil)
	data, _ := os.ReadFile(path)
	if _, problems := Verify(data, nil); len(problems) > 0 {
		t.Fatalf("a concurrent run's report: %s", joined(problems))
	}
	// Every planned serve is there once, in plan order, whatever order
	// they finished in.
	for i, sv := range rep.Body.Serves {
		if sv.Index != i {
			t.Fatalf("serves[%d] is serve %d", i, sv.Index)
		}
	}
	if len(rep.Body.Serves) != 13 || !rep.Body.Status.Complete {
		t.Fatalf("%d serves, complete %v", len(rep.Body.Serves), rep.Body.Status.Complete)
	}
}

func TestPathAt(t *testing.T) {
	doc := []byte(`{"body":{"chain":{"envelopes":["aa","bb","cc"]},"n":12},"x":[{"y":1},{"z":"w"}]}`)
	for _, tc := range []struct {
		at   string // the byte's context, found in doc
		skip int
		want string
	}{
		{`"bb"`, 1, "body.chain.envelopes[1]"},
		{`"cc"`, 2, "body.chain.envelopes[2]"},
		{`12`, 1, "body.n"},
		{`"w"`, 1, "x[1].z"},
		{`"y"`, 1, "x[0].y"},
	} {
		off := bytes.Index(doc, []byte(tc.at)) + tc.skip
		if got := pathAt(doc, int64(off)); got != tc.want {
			t.Errorf("byte %d (%s): %q, want %q", off, tc.at, got, tc.want)
		}
	}
}

// meteredStack is startBenchStack over meteredBench.
func meteredStack(t *testing.T) *testStack {
	t.Helper()
	cfg, opts := meteredBench(t)
	return startBenchStack(t, cfg, opts)
}

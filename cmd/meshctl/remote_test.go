package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/api/client"
	"meshd/agent/node"
	"meshd/cmd/internal/cli"
	"meshd/steward"
)

// remoteBackends are two reference engines: no model files, deterministic
// answers.
const remoteBackends = `
[[backend]]
name = "ref-tiny"
kind = "reference"
fidelity = 1
uj_per_token = 40
work = 8

[[backend]]
name = "ref-mid"
kind = "reference"
fidelity = 3
uj_per_token = 300
work = 16
`

// testStack is a node and its HTTP API on loopback, as `meshd serve` runs
// them (package main of cmd/meshd cannot be imported, so it is assembled
// here from the same parts).
type testStack struct {
	n    *node.Node
	api  *api.Server
	srv  *httptest.Server
	addr string // host:port
}

func startStack(t *testing.T, extra string) *testStack {
	t.Helper()
	st := apitest.Start(t, extra, node.Options{})
	return &testStack{n: st.Node, api: st.API, srv: st.Server, addr: st.Addr}
}

// seal serves k prompts through the client, so the chain has receipts.
func (s *testStack) seal(t *testing.T, k int) {
	t.Helper()
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	for i := range k {
		if _, err := c.Serve(context.Background(), client.ServeRequest{Prompt: fmt.Sprintf("prompt %d", i), MaxTokens: 4}); err != nil {
			t.Fatalf("serve %d: %v", i, err)
		}
	}
}

// logged opens receipt seq from the node's own log.
func (s *testStack) logged(t *testing.T, seq uint64) *steward.Opened {
	t.Helper()
	return apitest.Logged(t, s.n, seq)
}

// meshctl runs one meshctl command line.
func meshctl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	err = run(ctx, args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestRemoteServe(t *testing.T) {
	s := startStack(t, remoteBackends)
	c, err := client.New(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	floor := uint8(1)
	// The reference engine is deterministic: what the daemon answers
	// directly is what meshctl must print.
	want, err := c.Serve(context.Background(), client.ServeRequest{Prompt: "what is a joule", MaxTokens: 8, FidelityFloor: &floor, JouleCeilingUJ: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"whole", []string{"serve", "-addr", s.addr, "-floor", "1", "-ceiling", "100000", "-max", "8", "what", "is", "a", "joule"}},
		{"stream", []string{"serve", "-addr", "http://" + s.addr, "-stream", "-floor", "1", "-ceiling", "100000", "-max", "8", "what is a joule"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.n.Stores.Log.Durable()
			out, errOut, err := meshctl(context.Background(), tc.args...)
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			if got := strings.TrimSuffix(out, "\n"); got != want.Text {
				t.Errorf("printed %q, the daemon answers %q", got, want.Text)
			}
			if s.n.Stores.Log.Durable() != before+1 {
				t.Fatalf("the log went from %d to %d receipts, want one more", before, s.n.Stores.Log.Durable())
			}
			r := s.logged(t, before)
			for _, line := range []string{
				"sequence  " + strconv.FormatUint(before, 10),
				"id  " + r.ID.String(),
				"backend  " + r.Receipt.Backend,
				fmt.Sprintf("tokens  in %d, out %d, accepted %d", r.Receipt.TokensIn, r.Receipt.TokensOut, r.Receipt.TokensAccepted),
				"µJ/accepted token  " + optU64(r.Receipt.UJPerAcceptedToken),
				"provenance  " + r.Receipt.EnergyProvenance,
				"error bound  " + map[bool]string{true: "-", false: "± " + optU64(r.Receipt.ErrorUJ) + " µJ"}[r.Receipt.ErrorUJ == nil],
				"route  " + r.Receipt.Route,
			} {
				if !containsSpaced(errOut, line) {
					t.Errorf("the summary lacks %q:\n%s", line, errOut)
				}
			}
		})
	}
}

// columns splits a tabwriter row at its padding (two or more spaces), so
// a cell may hold single spaces.
func columns(line string) []string {
	var out []string
	for _, c := range strings.Split(strings.TrimSpace(line), "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// containsSpaced is strings.Contains with any run of two or more spaces in
// want matching any run of two or more in s (tabwriter pads columns).
func containsSpaced(s, want string) bool {
	norm := func(x string) string {
		for strings.Contains(x, "   ") {
			x = strings.ReplaceAll(x, "   ", "  ")
		}
		return x
	}
	return strings.Contains(norm(s), norm(want))
}

func TestRemoteServeRefused(t *testing.T) {
	s := startStack(t, remoteBackends)
	// No backend reaches F4: the router refuses, naming no_route.
	out, errOut, err := meshctl(context.Background(), "serve", "-addr", s.addr, "-floor", "4", "hello")
	if err == nil {
		t.Fatalf("a refused serve succeeded:\n%s%s", out, errOut)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "no_route" || !strings.Contains(err.Error(), "no_route") {
		t.Fatalf("error %v (%T) does not name no_route", err, err)
	}
	if errors.Is(err, errUsage) {
		t.Fatalf("a refusal must not exit as a usage error: %v", err)
	}
	if ce.Route == "" || !strings.Contains(err.Error(), ce.Route) {
		t.Errorf("error %q lacks the router's justification %q", err, ce.Route)
	}
	if out != "" {
		t.Errorf("a refusal printed an answer: %q", out)
	}
	if d := s.n.Stores.Log.Durable(); d != 0 {
		t.Errorf("a refusal sealed %d receipts", d)
	}
}

func TestRemoteServeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"serve"},
		{"serve", "-floor", "5", "x"},
		{"serve", "-addr", "nowhere", "x"},
		{"receipts"},
		{"receipts", "head"},
		{"verify", "-remote", "some/path"},
		{"meters", "-interval", "0"},
	} {
		if _, _, err := meshctl(context.Background(), args...); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// tailRows parses the sequence column of a receipts tail table.
func tailRows(t *testing.T, out string) []uint64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || !strings.Contains(lines[0], "SEQ") {
		t.Fatalf("no header:\n%s", out)
	}
	var seqs []uint64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			t.Fatalf("row %q: %v", l, err)
		}
		seqs = append(seqs, v)
	}
	return seqs
}

func TestReceiptsTail(t *testing.T) {
	s := startStack(t, remoteBackends)
	s.seal(t, 5)
	for _, tc := range []struct {
		n    string
		want []uint64
	}{
		{"3", []uint64{2, 3, 4}},
		{"5", []uint64{0, 1, 2, 3, 4}},
		{"50", []uint64{0, 1, 2, 3, 4}},
		{"0", nil},
	} {
		t.Run("n="+tc.n, func(t *testing.T) {
			out, errOut, err := meshctl(context.Background(), "receipts", "tail", "-addr", s.addr, "-n", tc.n)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if got := tailRows(t, out); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("rows %v, want %v:\n%s", got, tc.want, out)
			}
		})
	}
	// Each row shows the receipt's own figures.
	out, _, err := meshctl(context.Background(), "receipts", "tail", "-addr", s.addr, "-n", "1")
	if err != nil {
		t.Fatal(err)
	}
	r := s.logged(t, 4).Receipt
	row := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1])
	sealed := time.UnixMilli(int64(*r.SealedUnixMs)).Format("2006-01-02 15:04:05.000")
	want := append([]string{"4"}, strings.Fields(sealed)...)
	want = append(want, r.Backend, fmt.Sprintf("%d/%d", r.TokensAccepted, r.TokensOut), optU64(r.UJPerAcceptedToken), r.EnergyProvenance, optU64(r.ErrorUJ))
	if fmt.Sprint(row) != fmt.Sprint(want) {
		t.Errorf("row %q, want %q", row, want)
	}
}

// lineBuffer is an io.Writer that a test can wait on for some output.
type lineBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{}
}

func newLineBuffer() *lineBuffer { return &lineBuffer{changed: make(chan struct{}, 1)} }

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.changed <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor returns once ok holds of the output, or fails at ctx's end.
func (l *lineBuffer) waitFor(ctx context.Context, t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	for !ok(l.String()) {
		select {
		case <-l.changed:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; output so far:\n%s", what, ctx.Err(), l.String())
		}
	}
}

func hasRow(seq uint64) func(string) bool {
	return func(out string) bool {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.FormatUint(seq, 10) {
				return true
			}
		}
		return false
	}
}

func TestReceiptsTailFollow(t *testing.T) {
	s := startStack(t, remoteBackends)
	s.seal(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tailCtx, stop := context.WithCancel(ctx)
	out, errb := newLineBuffer(), newLineBuffer()
	done := make(chan error, 1)
	go func() {
		done <- run(tailCtx, []string{"receipts", "tail", "-addr", s.addr, "-f", "-n", "5", "-interval", "10ms"}, out, errb)
	}()
	out.waitFor(ctx, t, "the existing receipts", hasRow(1))
	// Sealed after tail printed what there was: only -f's polling can
	// show it.
	s.seal(t, 1)
	out.waitFor(ctx, t, "receipt 2, sealed after tail started", hasRow(2))
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail -f ended with %v after Ctrl-C\n%s", err, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("tail -f did not stop when its context was cancelled")
	}
	if got := tailRows(t, out.String()); fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("rows %v, want each receipt once in order:\n%s", got, out.String())
	}
}

// tamperingProxy fronts the daemon and alters receipt pages: flip spoils
// the envelope of sequence seq (one bit of its signature); drop leaves
// that receipt out of the page.
func tamperingProxy(t *testing.T, upstream string, seq uint64, mode string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/v1/receipts" || resp.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var page map[string]any
		if err := json.Unmarshal(body, &page); err != nil {
			return err
		}
		rs, _ := page["receipts"].([]any)
		var kept []any
		for _, x := range rs {
			r := x.(map[string]any)
			if uint64(r["sequence"].(float64)) != seq {
				kept = append(kept, r)
				continue
			}
			if mode == "drop" {
				continue
			}
			env, err := base64.StdEncoding.DecodeString(r["envelope"].(string))
			if err != nil {
				return err
			}
			env[len(env)-1] ^= 1 // the signature's last byte
			r["envelope"] = base64.StdEncoding.EncodeToString(env)
			kept = append(kept, r)
		}
		page["receipts"] = kept
		if kept == nil {
			page["receipts"] = []any{}
		}
		body, err = json.Marshal(page)
		if err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	return srv
}

func TestReceiptsTailBrokenLink(t *testing.T) {
	s := startStack(t, remoteBackends)
	s.seal(t, 4)
	p := tamperingProxy(t, s.srv.URL, 2, "drop")
	out, errOut, err := meshctl(context.Background(), "receipts", "tail", "-addr", p.URL, "-n", "4")
	if err == nil {
		t.Fatalf("tail accepted a chain with receipt 2 missing:\n%s%s", out, errOut)
	}
	if !strings.Contains(err.Error(), "receipt 3 does not follow receipt 1") {
		t.Fatalf("error %q does not name both sequences", err)
	}
}

func TestVerifyRemote(t *testing.T) {
	s := startStack(t, remoteBackends)
	const count = 6
	s.seal(t, count)
	head := s.logged(t, count-1).ID.String()
	good := s.n.Key.ID()
	other, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		addr    func() string
		args    []string
		want    []string // in stdout, on success
		wantErr string   // in the error, on failure
	}{
		{name: "daemon's key", addr: func() string { return s.addr },
			want: []string{"trusting the key the daemon names: " + good, fmt.Sprintf("chain OK: %d receipts", count), "head " + head}},
		{name: "pinned key", addr: func() string { return s.addr }, args: []string{"-trust", good},
			want: []string{"trusting steward " + good + " (-trust)", fmt.Sprintf("chain OK: %d receipts", count)}},
		{name: "wrong key", addr: func() string { return s.addr }, args: []string{"-trust", other.ID()},
			wantErr: "sequence 0"},
		{name: "flipped byte", addr: func() string { return tamperingProxy(t, s.srv.URL, 3, "flip").URL },
			wantErr: "sequence 3"},
		{name: "missing receipt", addr: func() string { return tamperingProxy(t, s.srv.URL, 4, "drop").URL },
			wantErr: "sequence 4: expected here, got sequence 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"verify", "-remote", "-addr", tc.addr()}, tc.args...)
			out, errOut, err := meshctl(context.Background(), args...)
			if tc.wantErr != "" {
				var ee *cli.ExitError
				if !errors.As(err, &ee) || ee.Code != exitDamaged {
					t.Fatalf("want exit %d, got %v (%T)\n%s%s", exitDamaged, err, err, out, errOut)
				}
				if !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %q does not name %q", err, tc.wantErr)
				}
				if strings.Contains(out, "chain OK") {
					t.Fatalf("said OK on failure:\n%s", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// A wrong head is caught even when every receipt verifies: a proxy that
// answers /v1/chain/head from a different moment (or a lie) is named.
func TestVerifyRemoteHeadMismatch(t *testing.T) {
	s := startStack(t, remoteBackends)
	s.seal(t, 3)
	wrong := s.logged(t, 1).ID.String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/chain/head", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"steward":%q,"receipts":3,"head":%q,"sequence":2}`, s.n.Key.ID(), wrong)
	})
	u, _ := url.Parse(s.srv.URL)
	mux.Handle("/", httputil.NewSingleHostReverseProxy(u))
	p := httptest.NewServer(mux)
	defer p.Close()
	_, _, err := meshctl(context.Background(), "verify", "-remote", "-addr", p.URL)
	if err == nil || !strings.Contains(err.Error(), "sequence 2 is") || !strings.Contains(err.Error(), wrong) {
		t.Fatalf("error %v does not name the head mismatch at sequence 2", err)
	}
}

func TestVerifyRemoteEmptyChain(t *testing.T) {
	s := startStack(t, remoteBackends)
	out, _, err := meshctl(context.Background(), "verify", "-remote", "-addr", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "chain OK: 0 receipts") {
		t.Fatalf("output:\n%s", out)
	}
}

// unixStack serves s's API on a unix socket too, as meshd does.
func unixStack(t *testing.T, s *testStack) string {
	t.Helper()
	// Socket paths are short (108 bytes): a TempDir under a long test name
	// can pass that.
	dir, err := os.MkdirTemp("", "meshctl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "m.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.srv.Config.Handler}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return path
}

func TestBackendsTable(t *testing.T) {
	s := startStack(t, remoteBackends)
	sock := unixStack(t, s)
	for _, addr := range []string{s.addr, "unix:" + sock, sock} {
		t.Run(addr, func(t *testing.T) {
			out, errOut, err := meshctl(context.Background(), "backends", "-addr", addr)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 {
				t.Fatalf("want a header and two rows:\n%s", out)
			}
			if h := strings.Fields(lines[0]); h[0] != "NAME" || h[len(h)-1] != "RESTARTS" {
				t.Fatalf("header %q", lines[0])
			}
			rows := map[string][]string{}
			for _, l := range lines[1:] {
				f := columns(l)
				rows[f[0]] = f
			}
			// name kind fidelity configured routing source span state restarts
			for name, want := range map[string][]string{
				"ref-tiny": {"ref-tiny", "reference", "F1", "40"},
				"ref-mid":  {"ref-mid", "reference", "F3", "300"},
			} {
				got := rows[name]
				if len(got) != 9 || fmt.Sprint(got[:5]) != fmt.Sprint(append(want, want[3])) || !strings.HasPrefix(got[5], "configured") ||
					got[6] != "-" || got[7] != "ready" || got[8] != "0" {
					t.Errorf("row %q, want %q, the same routing cost from the configuration, no span, ready, 0 restarts", got, want)
				}
			}
		})
	}
}

func TestAddrFromEnvironment(t *testing.T) {
	s := startStack(t, remoteBackends)
	t.Setenv(addrEnv, s.addr)
	out, errOut, err := meshctl(context.Background(), "backends")
	if err != nil || !strings.Contains(out, "ref-tiny") {
		t.Fatalf("with %s=%s: %v\n%s%s", addrEnv, s.addr, err, out, errOut)
	}
	t.Setenv(addrEnv, "127.0.0.1:1")
	if _, _, err := meshctl(context.Background(), "backends"); err == nil {
		t.Fatal("the environment's address was not used")
	}
}

// meteredConfig is remoteBackends with ref-tiny metered by an INA226 rail
// under the kernel's hwmon driver, faked in a sysfs tree: 12 V × 1.5 A.
func meteredConfig(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	rail := filepath.Join(root, "hwmon0")
	if err := os.MkdirAll(rail, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"name": "ina226", "in1_input": "12000", "curr1_input": "1500", "power1_input": "18000000", "update_interval": "1000",
	} {
		if err := os.WriteFile(filepath.Join(rail, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf(`
[metering]
on_meter_failure = "estimate"

[[meter]]
name = "rail"
driver = "hwmon"
rail = "hwmon0/ina226:1"
hwmon_root = %q
shunt_uohm = 2000

[[backend]]
name = "ref-tiny"
kind = "reference"
fidelity = 1
uj_per_token = 40
work = 8
meters = ["rail"]
`, root)
}

func TestMetersTable(t *testing.T) {
	s := startStack(t, meteredConfig(t))
	out, errOut, err := meshctl(context.Background(), "meters", "-addr", s.addr)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "METER") {
		t.Fatalf("want a header and one row:\n%s", out)
	}
	f := columns(lines[1])
	// meter driver kind provenance watts healthy readings invalid stalls.
	// Health and the counters move with the sampler; what the
	// configuration fixes must be exact.
	if len(f) != 9 || fmt.Sprint(f[:5]) != "[rail hwmon point ModelBased 18.000]" {
		t.Fatalf("row %q, want rail hwmon point ModelBased 18.000 (12 V × 1.5 A)", f)
	}
	if n, err := strconv.Atoi(f[6]); err != nil || n < 1 {
		t.Errorf("readings %q, want at least one", f[6])
	}

	// The backend it meters names it as its span.
	out, _, err = meshctl(context.Background(), "backends", "-addr", s.addr)
	if err != nil || !containsSpaced(out, "hwmon:hwmon0/ina226:1  ready") {
		t.Errorf("backends does not show the span: %v\n%s", err, out)
	}
}

// The table's cells from rows the daemon might send, exactly: watts from
// µW, an unhealthy meter's reason, the older "provenance" name, absent
// fields.
func TestMeterTableCells(t *testing.T) {
	const body = `{"meters":[
	{"name":"b","driver":"ina226","kind":"averaged","best_provenance":"HwShunt","power_uw":1234567,"healthy":true,"readings":120000000,"invalid":2,"stalls":0},
	{"name":"a","driver":"rapl","kind":"counter","provenance":"ModelBased","healthy":false,"health":"sampler stopped","readings":0,"invalid":0,"stalls":3}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/meters" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	out, _, err := meshctl(context.Background(), "meters", "-addr", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"METER", "DRIVER", "KIND", "PROVENANCE", "LIVE W", "HEALTHY", "READINGS", "INVALID", "STALLS"},
		{"a", "rapl", "counter", "ModelBased", "-", "false (sampler stopped)", "0", "0", "3"},
		{"b", "ina226", "averaged", "HwShunt", "1.235", "true", "120000000", "2", "0"},
	}
	if len(lines) != len(want) {
		t.Fatalf("want %d lines:\n%s", len(want), out)
	}
	for i, w := range want {
		if got := columns(lines[i]); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
}

func TestMetersWatch(t *testing.T) {
	s := startStack(t, meteredConfig(t))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	watchCtx, stop := context.WithCancel(ctx)
	out, errb := newLineBuffer(), newLineBuffer()
	done := make(chan error, 1)
	go func() {
		done <- run(watchCtx, []string{"meters", "-addr", s.addr, "-watch", "-interval", "10ms"}, out, errb)
	}()
	// Not a terminal: whole tables one after another, no escape codes.
	out.waitFor(ctx, t, "a second table", func(s string) bool { return strings.Count(s, "METER") >= 2 })
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("-watch ended with %v after Ctrl-C\n%s", err, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("-watch did not stop when its context was cancelled")
	}
	if strings.Contains(out.String(), "\033[") {
		t.Errorf("escape codes written to a pipe:\n%q", out.String())
	}
	if n := strings.Count(out.String(), "\nrail "); n < 2 {
		t.Errorf("%d meter rows in two tables:\n%s", n, out.String())
	}
}

// Progress lines and redraws go only to a terminal: a pipe or a buffer
// gets plain output.
func TestIsTerminal(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	tty, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0) // a character device, as a terminal is
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"buffer", &bytes.Buffer{}, false},
		{"pipe", w, false},
		{"character device", tty, true},
	} {
		if got := isTerminal(tc.w); got != tc.want {
			t.Errorf("%s: isTerminal %v, want %v", tc.name, got, tc.want)
		}
	}
	var buf bytes.Buffer
	p := progressTo(&buf)
	p(1000, 5000)
	p(5000, 0)
	if buf.Len() != 0 {
		t.Errorf("progress written to a buffer: %q", buf.String())
	}
}

// `serve -floor 2` prints the served backend's fidelity (ref-mid, F3) and
// the floor, not fidelity_met (1) as a fidelity.
func TestRemoteServePrintsServedFidelity(t *testing.T) {
	s := startStack(t, remoteBackends)
	out, errOut, err := meshctl(context.Background(), "serve", "-addr", s.addr, "-floor", "2", "-ceiling", "100000", "-max", "8", "hello")
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	if !containsSpaced(errOut, "backend  ref-mid (F3, floor F2)") {
		t.Errorf("the summary lacks the served fidelity:\n%s", errOut)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/steward"
)

// testDaemon is a `meshd serve` running in the test process on loopback.
type testDaemon struct {
	t      *testing.T
	dir    string
	d      *daemon
	base   string
	cancel context.CancelFunc
	done   chan error
	logs   *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const refBackends = `
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

// startDaemon writes a config of extra plus the listen and state lines and
// runs the daemon until the test ends.
func startDaemon(t *testing.T, extra string, hooks serveHooks) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf("[steward]\nstate_dir = %q\n\n[listen]\ntcp = [\"127.0.0.1:0\"]\nunix = %q\nserve_timeout = \"30s\"\nshutdown_timeout = \"5s\"\n\n%s",
		filepath.Join(dir, "state"), filepath.Join(dir, "meshd.sock"), extra)
	path := filepath.Join(dir, "meshd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return runDaemon(t, dir, path, hooks)
}

func runDaemon(t *testing.T, dir, path string, hooks serveHooks) *testDaemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	td := &testDaemon{t: t, dir: dir, cancel: cancel, done: make(chan error, 1), logs: &syncBuffer{}}
	started := make(chan *daemon, 1)
	hooks.started = func(d *daemon) { started <- d }
	if hooks.getenv == nil {
		hooks.getenv = func(string) string { return "" }
	}
	go func() { td.done <- runServeWith(ctx, []string{"-config", path}, td.logs, hooks) }()
	select {
	case td.d = <-started:
	case err := <-td.done:
		cancel()
		t.Fatalf("daemon did not start: %v\n%s", err, td.logs.String())
	}
	td.base = "http://" + td.d.addrs[0].String()
	t.Cleanup(func() { td.stop() })
	return td
}

// stop ends the daemon as SIGTERM does and returns its error.
func (td *testDaemon) stop() error {
	td.cancel()
	err, ok := <-td.done
	if ok {
		close(td.done)
	}
	return err
}

func (td *testDaemon) post(path string, body any) (*http.Response, []byte) {
	td.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(td.base+path, "application/json", bytes.NewReader(b))
	if err != nil {
		td.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		td.t.Fatal(err)
	}
	return resp, data
}

func (td *testDaemon) get(path string) (*http.Response, []byte) {
	td.t.Helper()
	resp, err := http.Get(td.base + path)
	if err != nil {
		td.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// The serve lifecycle through the real HTTP server: serve, fetch the
// receipt by sequence, verify the chain from outside with the steward's
// public key only.
func TestServeOverHTTPAndVerifyFromOutside(t *testing.T) {
	td := startDaemon(t, refBackends, serveHooks{})
	resp, body := td.post("/v1/serve", map[string]any{"prompt": "what is a joule", "max_tokens": 8, "fidelity_floor": 1, "joule_ceiling_uj": 100000})
	if resp.StatusCode != 200 {
		t.Fatalf("serve: %d %s", resp.StatusCode, body)
	}
	var sr struct {
		Text    string
		Backend string
		Outcome map[string]int
		Receipt struct {
			ID       string
			Sequence uint64
			Envelope string
			Receipt  map[string]any
		}
	}
	if err := json.Unmarshal(body, &sr); err != nil {
		t.Fatal(err)
	}
	if sr.Backend != "ref-tiny" || sr.Outcome["tokens_out"] != 8 || len(strings.Fields(sr.Text)) != 8 {
		t.Fatalf("serve reply: %s", body)
	}
	if resp.Header.Get("Mesh-Receipt-Id") != sr.Receipt.ID || sr.Receipt.Receipt["energy_provenance"] != "Estimator" {
		t.Fatalf("receipt header %q, body %+v", resp.Header.Get("Mesh-Receipt-Id"), sr.Receipt)
	}
	// A refusal names the router's reason.
	resp, body = td.post("/v1/serve", map[string]any{"prompt": "x", "max_tokens": 8, "fidelity_floor": 4, "joule_ceiling_uj": 100000})
	if resp.StatusCode != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte("no_route")) || !bytes.Contains(body, []byte("admissible")) {
		t.Fatalf("unroutable serve: %d %s", resp.StatusCode, body)
	}
	// The raw envelope by sequence is the one the serve returned.
	resp, raw := td.get(fmt.Sprintf("/v1/receipts/%d", sr.Receipt.Sequence))
	env, _ := base64.StdEncoding.DecodeString(sr.Receipt.Envelope)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != `application/cose; cose-type="cose-sign1"` || !bytes.Equal(raw, env) {
		t.Fatalf("GET receipt: %d %q, %d bytes (want %d)", resp.StatusCode, resp.Header.Get("Content-Type"), len(raw), len(env))
	}
	if resp, _ := td.get("/v1/receipts/99"); resp.StatusCode != 404 {
		t.Fatalf("missing receipt: %d", resp.StatusCode)
	}
	for i := range 4 {
		if resp, body := td.post("/v1/serve", map[string]any{"prompt": fmt.Sprint("again ", i), "max_tokens": 4, "joule_ceiling_uj": 100000}); resp.StatusCode != 200 {
			t.Fatalf("serve %d: %s", i, body)
		}
	}
	// Verify the chain from outside: the head names the steward; every
	// envelope opens under its key and links to the one before.
	_, hb := td.get("/v1/chain/head")
	var head struct {
		Steward  string
		Receipts uint64
		Head     string
	}
	json.Unmarshal(hb, &head)
	pub, err := steward.ParsePublicKey(head.Steward)
	if err != nil || head.Receipts != 5 {
		t.Fatalf("head %s: %v", hb, err)
	}
	var prev *steward.Opened
	for after := int64(-1); ; {
		q := "/v1/receipts?limit=2"
		if after >= 0 {
			q += fmt.Sprintf("&after=%d", after)
		}
		_, lb := td.get(q)
		var page struct {
			Receipts []struct {
				Sequence uint64
				Envelope string
			}
			NextAfter int64 `json:"next_after"`
		}
		if err := json.Unmarshal(lb, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Receipts) == 0 {
			break
		}
		for _, r := range page.Receipts {
			env, _ := base64.StdEncoding.DecodeString(r.Envelope)
			o, err := steward.OpenEnvelope(env, pub)
			if err != nil {
				t.Fatalf("receipt %d: %v", r.Sequence, err)
			}
			if prev != nil {
				if err := steward.CheckLink(prev, o); err != nil {
					t.Fatalf("receipt %d: %v", r.Sequence, err)
				}
			}
			prev = o
		}
		after = page.NextAfter
	}
	if prev == nil || prev.Receipt.Sequence != 4 || prev.ID.String() != head.Head {
		t.Fatalf("walked the chain to %+v, head %s", prev, head.Head)
	}
	if err := td.stop(); err != nil {
		t.Fatalf("clean stop: %v\n%s", err, td.logs.String())
	}
	rep, err := steward.VerifyLog(context.Background(), filepath.Join(td.dir, "state", "receipts"), steward.VerifyOptions{Trusted: pub})
	if err != nil || rep.Records != 5 {
		t.Fatalf("log after stop: %v %+v", err, rep)
	}
	if !strings.Contains(td.logs.String(), "stopped cleanly") {
		t.Fatalf("no clean-stop log line:\n%s", td.logs.String())
	}
}

// OpenAI-shaped calls, whole and streamed; the stream's last event carries
// the receipt and the trailers name it.
func TestOpenAICompletionsAndChat(t *testing.T) {
	td := startDaemon(t, refBackends, serveHooks{})
	resp, body := td.post("/v1/completions", map[string]any{"model": "any", "prompt": "hello there", "max_tokens": 5})
	if resp.StatusCode != 200 {
		t.Fatalf("completions: %d %s", resp.StatusCode, body)
	}
	var c struct {
		Object  string
		Choices []struct {
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage   map[string]int
		Receipt struct{ ID string }
	}
	json.Unmarshal(body, &c)
	if c.Object != "text_completion" || len(c.Choices) != 1 || len(strings.Fields(c.Choices[0].Text)) != 5 ||
		c.Choices[0].FinishReason != "length" || c.Usage["completion_tokens"] != 5 || c.Receipt.ID != resp.Header.Get("Mesh-Receipt-Id") {
		t.Fatalf("completion: %s", body)
	}
	resp, body = td.post("/v1/chat/completions", map[string]any{"model": "any", "max_tokens": 3,
		"messages": []map[string]any{{"role": "system", "content": "be brief"}, {"role": "user", "content": []map[string]string{{"type": "text", "text": "hi"}}}}})
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"object":"chat.completion"`)) || !bytes.Contains(body, []byte(`"role":"assistant"`)) {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}

	// Streamed chat: role first, then content pieces, then the receipt.
	b, _ := json.Marshal(map[string]any{"model": "x", "stream": true, "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "stream please"}}})
	sresp, err := http.Post(td.base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	if sresp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream content type %q", sresp.Header.Get("Content-Type"))
	}
	var text strings.Builder
	var events []map[string]any
	sc := bufio.NewScanner(sresp.Body)
	doneSeen := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if line == "data: [DONE]" {
			doneSeen = true
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line[6:]), &ev); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		events = append(events, ev)
		ch := ev["choices"].([]any)[0].(map[string]any)
		if d, ok := ch["delta"].(map[string]any); ok {
			if s, ok := d["content"].(string); ok {
				text.WriteString(s)
			}
		}
	}
	if !doneSeen || len(events) < 3 {
		t.Fatalf("stream: %d events, done %v", len(events), doneSeen)
	}
	last := events[len(events)-1]
	rc, ok := last["receipt"].(map[string]any)
	if !ok || sresp.Trailer.Get("Mesh-Receipt-Id") != rc["id"] {
		t.Fatalf("last event %v, trailer %q", last, sresp.Trailer.Get("Mesh-Receipt-Id"))
	}
	if got := len(strings.Fields(text.String())); got != 4 {
		t.Fatalf("streamed text %q: %d words, want 4", text.String(), got)
	}
	if rc["receipt"].(map[string]any)["tokens_out"].(float64) != 4 {
		t.Fatalf("receipt claims %v tokens out", rc["receipt"].(map[string]any)["tokens_out"])
	}
}

// Malformed input gets a 4xx naming the field; oversized bodies a 413.
func TestBadRequestsNameTheField(t *testing.T) {
	td := startDaemon(t, refBackends+"\n", serveHooks{})
	cases := []struct {
		path   string
		body   string
		status int
		want   string
	}{
		{"/v1/serve", `{"prompt": "", "max_tokens": 4}`, 400, `"param":"prompt"`},
		{"/v1/serve", `{"prompt": "x", "max_tokens": "four"}`, 400, `"param":"max_tokens"`},
		{"/v1/serve", `{"prompt": "x", "fidelity_floor": 9}`, 400, `"param":"fidelity_floor"`},
		{"/v1/serve", `{"prompt": "x", "joule_ceiling_uj": 0}`, 400, `"param":"joule_ceiling_uj"`},
		{"/v1/serve", `{"prompt": "x", "grant": "!!"}`, 400, `"param":"grant"`},
		{"/v1/serve", `{"prompt": "x"`, 400, "malformed_json"},
		{"/v1/serve", `{"prompt": "x"} {}`, 400, "trailing data"},
		{"/v1/completions", `{"prompt": ["a", "b"]}`, 400, `"param":"prompt"`},
		{"/v1/completions", `{"prompt": "a", "n": 2}`, 400, `"param":"n"`},
		{"/v1/chat/completions", `{"messages": []}`, 400, `"param":"messages"`},
		{"/v1/chat/completions", `{"messages": [{"role": "wizard", "content": "x"}]}`, 400, `"param":"messages[0]"`},
		{"/v1/serve", `{"prompt": "` + strings.Repeat("a", 2<<20) + `"}`, 413, "body_too_large"},
	}
	for _, c := range cases {
		resp, err := http.Post(td.base+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !bytes.Contains(body, []byte(c.want)) {
			t.Errorf("%s %.60s: %d %s, want %d with %s", c.path, c.body, resp.StatusCode, body, c.status, c.want)
		}
	}
	// Nothing was sealed for any of them.
	_, hb := td.get("/v1/chain/head")
	if !bytes.Contains(hb, []byte(`"receipts":0`)) {
		t.Fatalf("bad requests sealed receipts: %s", hb)
	}
}

// Metrics are exposed in Prometheus' format with the serve counters.
func TestMetricsExposeServes(t *testing.T) {
	td := startDaemon(t, refBackends, serveHooks{})
	td.post("/v1/serve", map[string]any{"prompt": "count me", "max_tokens": 4, "joule_ceiling_uj": 100000})
	td.post("/v1/serve", map[string]any{"prompt": "x", "max_tokens": 8, "fidelity_floor": 4, "joule_ceiling_uj": 100000})
	_, m := td.get("/metrics")
	for _, want := range []string{
		`meshd_serves_total{backend="ref-tiny",provenance="Estimator"} 1`,
		`meshd_refusals_total{backend="",reason="no_route"} 1`,
		`meshd_tokens_total{backend="ref-tiny",direction="out"} 4`,
		`meshd_log_fsync_seconds_count`,
		`meshd_receipts 1`,
	} {
		if !bytes.Contains(m, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A bad configuration is refused at start with every problem listed.
func TestServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.toml")
	os.WriteFile(path, []byte("[listen]\ntcp = [\"nowhere\"]\n\n[[backend]]\nname = \"a\"\nkind = \"teleporter\"\nfidelity = 9\n"), 0o600)
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"check-config", "-config", path}, &out, &errb)
	if err == nil {
		t.Fatal("check-config passed a bad file")
	}
	for _, want := range []string{"bad.toml:2:", "bad.toml:6:", "bad.toml:7:", "listen.tcp[0]", "backend[0].kind", "backend[0].fidelity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
	err = runServeWith(context.Background(), []string{"-config", path}, &errb, serveHooks{})
	if err == nil || !strings.Contains(err.Error(), "backend[0].kind") {
		t.Fatalf("serve started on a bad config: %v", err)
	}
}

// SIGHUP rereads the configuration: a backend added to the file is routed
// to without a restart, the chain continues, and a file with problems
// changes nothing.
func TestReloadOnSIGHUP(t *testing.T) {
	td := startDaemon(t, refBackends, serveHooks{})
	if resp, body := td.post("/v1/serve", map[string]any{"prompt": "before", "max_tokens": 2, "joule_ceiling_uj": 100000}); resp.StatusCode != 200 {
		t.Fatalf("serve: %s", body)
	}
	path := filepath.Join(td.dir, "meshd.toml")
	orig, _ := os.ReadFile(path)
	waitBackends := func(want string, present bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, b := td.get("/v1/backends")
			if bytes.Contains(b, []byte(`"name":"`+want+`"`)) == present {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("backend %s present=%v never seen after SIGHUP: %s\n%s", want, present, b, td.logs.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	add := "\n[[backend]]\nname = \"ref-top\"\nkind = \"reference\"\nfidelity = 4\nuj_per_token = 500\nwork = 4\n"
	if err := os.WriteFile(path, append(append([]byte{}, orig...), add...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitBackends("ref-top", true)
	resp, body := td.post("/v1/serve", map[string]any{"prompt": "after", "max_tokens": 2, "fidelity_floor": 4, "joule_ceiling_uj": 100000})
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"backend":"ref-top"`)) || !bytes.Contains(body, []byte(`"sequence":1`)) {
		t.Fatalf("serve on the reloaded backend: %d %s", resp.StatusCode, body)
	}
	// A broken file: the reload is refused and logged, ref-top stays.
	os.WriteFile(path, append(append([]byte{}, orig...), "\n[[backend]]\nname = 7\n"...), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(td.logs.String(), "reload refused") {
		if time.Now().After(deadline) {
			t.Fatalf("bad reload not logged:\n%s", td.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitBackends("ref-top", true)
}

// What check-config finds missing on this machine stops serve before
// anything is opened, with the same line and key; -offline checks the
// file alone and passes it.
func TestServeRefusesWhatCheckConfigFinds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meshd.toml")
	doc := fmt.Sprintf("[steward]\nstate_dir = %q\n\n[[backend]]\nname = \"g\"\nkind = \"mesh-gguf\"\nmodel = %q\nrunner = %q\nfidelity = 2\nuj_per_token = 100\n",
		filepath.Join(dir, "state"), filepath.Join(dir, "absent.gguf"), filepath.Join(dir, "no-runner"))
	os.WriteFile(path, []byte(doc), 0o600)
	want := []string{
		fmt.Sprintf("%s:7:1: backend[0].model: model %s: no such file or directory", path, filepath.Join(dir, "absent.gguf")),
		fmt.Sprintf("%s:8:1: backend[0].runner: runner %s: no such file or directory", path, filepath.Join(dir, "no-runner")),
	}
	var out, errb bytes.Buffer
	cerr := run(context.Background(), []string{"check-config", "-config", path}, &out, &errb)
	serr := runServeWith(context.Background(), []string{"-config", path}, &errb, serveHooks{})
	for name, err := range map[string]error{"check-config": cerr, "serve": serr} {
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: want %q in:\n%v", name, w, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve opened the state directory before refusing: %v", err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"check-config", "-offline", "-config", path}, &out, &errb); err != nil {
		t.Fatalf("check-config -offline: %v", err)
	}
	if got := out.String(); !strings.Contains(got, "ok (1 backends, 0 meters; offline: nothing on this machine looked at)") {
		t.Fatalf("check-config -offline said %q", got)
	}
}

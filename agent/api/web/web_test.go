package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"lukechampine.com/blake3"

	"meshd/agent"
	"meshd/agent/api"
	"meshd/agent/api/client"
	"meshd/agent/api/web"
	"meshd/agent/config"
	"meshd/agent/node"
)

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// The handler serves the page at exactly /, its files under /static/
// with their types, the CSP on each, and nothing else.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()

	for _, tc := range []struct{ path, ctype, cache, contains string }{
		{"/", "text/html; charset=utf-8", "no-store", `<script src="/static/app.js" defer></script>`},
		{"/static/app.js", "text/javascript; charset=utf-8", "no-cache", `new EventSource("/v1/live`},
		{"/static/style.css", "text/css; charset=utf-8", "no-cache", ".prov-HwShunt"},
		{"/static/favicon.svg", "image/svg+xml", "no-cache", "<svg"},
	} {
		resp, body := get(t, srv.URL+tc.path, nil)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != tc.ctype || resp.Header.Get("Cache-Control") != tc.cache {
			t.Errorf("%s: %d %q %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
		}
		if csp := resp.Header.Get("Content-Security-Policy"); csp != web.CSP || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: CSP %q, nosniff %q", tc.path, csp, resp.Header.Get("X-Content-Type-Options"))
		}
		if !strings.Contains(body, tc.contains) {
			t.Errorf("%s does not contain %q", tc.path, tc.contains)
		}
		// Offline: nothing is loaded from another origin. The SVG's
		// namespace is a name, not a fetch.
		if strings.Contains(strings.ReplaceAll(body, `xmlns="http://www.w3.org/2000/svg"`, ""), "http://") || strings.Contains(body, "https://") || strings.Contains(body, "//fonts.") {
			t.Errorf("%s refers to another origin", tc.path)
		}
		// A revalidation of a static file costs a 304, not the file.
		if etag := resp.Header.Get("ETag"); tc.cache == "no-cache" {
			if r2, _ := get(t, srv.URL+tc.path, map[string]string{"If-None-Match": etag}); etag == "" || r2.StatusCode != http.StatusNotModified {
				t.Errorf("%s: ETag %q, revalidation %d", tc.path, etag, r2.StatusCode)
			}
		}
	}
	// No inline script: every <script> of the index has a src. (The CSP
	// would refuse an inline one; this catches it before a browser does.)
	_, index := get(t, srv.URL+"/", nil)
	if strings.Count(index, "<script") != strings.Count(index, `<script src="/static/`) {
		t.Errorf("the index has an inline script")
	}
	for _, csp := range []string{"script-src 'self'", "style-src 'self'", "connect-src 'self'", "default-src 'none'"} {
		if !strings.Contains(web.CSP, csp) {
			t.Errorf("the CSP lacks %q", csp)
		}
	}
	if strings.Contains(web.CSP, "unsafe-") {
		t.Errorf("the CSP allows something unsafe: %s", web.CSP)
	}
	for _, p := range []string{"/index.html", "/static/", "/static/nope.js", "/v1/nope", "/favicon.ico", "/static/../index.html"} {
		if resp, _ := get(t, srv.URL+p, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// refBackends are two reference engines: ref-tiny unmetered (its receipts
// are Estimator), ref-mid on the hwmon meter "vdd" with work hash rounds
// per token, so a serve on it runs for as long as the test needs.
func refBackends(work int) string {
	return fmt.Sprintf(`
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
work = %d
meters = ["vdd"]
`, work)
}

// stack is a node and its HTTP API on loopback, as `meshd serve` runs
// them, with the API's live stream told of every serve.
type stack struct {
	n   *node.Node
	api *api.Server
	srv *httptest.Server
}

// fixture is the hwmon tree whose INA3221 has the rail VDD_IN. Its
// readings are static, so the driver rightly calls the rail frozen (and
// the meter unhealthy) three update intervals after opening it; see
// movingRail for one that stays live.
func fixture(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../drivers/hwmon/testdata/hwmon")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// rail is a copy of the hwmon fixture whose VDD_IN current a goroutine
// keeps changing, as a live chip's does, so the meter stays healthy and
// its trace moves: a little jitter, and more current while busy says so.
type rail struct {
	root string
	busy atomic.Pointer[func() bool]
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

func movingRail(t *testing.T) *rail {
	t.Helper()
	src := fixture(t)
	root := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(root, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, rel), b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying the hwmon fixture: %v", err)
	}
	// A 50 ms conversion rather than the fixture's 7: the driver calls a
	// rail frozen after three unchanged intervals, and 21 ms is less than
	// a loaded test machine may keep the writer below from running.
	if err := os.WriteFile(filepath.Join(root, "hwmon1", "update_interval"), []byte("50\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &rail{root: root, stop: make(chan struct{}), done: make(chan struct{})}
	curr := filepath.Join(root, "hwmon1", "curr1_input")
	go func() {
		defer close(r.done)
		// Every 10 ms, well inside the driver's freshness window of three
		// 50 ms update intervals. A rename, so a read never sees half a
		// write.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
			ma := 1500 + 4*(i%9) // mA, at 19.07 V: about 28.6 W idle
			if f := r.busy.Load(); f != nil && (*f)() {
				ma += 900
			}
			tmp := curr + ".tmp"
			if os.WriteFile(tmp, []byte(strconv.Itoa(ma)+"\n"), 0o644) == nil {
				_ = os.Rename(tmp, curr)
			}
		}
	}()
	t.Cleanup(r.freeze)
	return r
}

// freeze stops the current changing: the chip looks frozen.
func (r *rail) freeze() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

func startStack(t *testing.T, work int, root string) *stack {
	t.Helper()
	dir := t.TempDir()
	text := fmt.Sprintf("[steward]\nstate_dir = %q\n\n[metering]\non_meter_failure = \"estimate\"\n\n"+
		"[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"VDD_IN\"\nhwmon_root = %q\n%s",
		filepath.Join(dir, "state"), root, refBackends(work))
	cfg, err := config.Parse([]byte(text), "web_test.toml")
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	// The server is made after the node, so the node tells it of serves
	// through this, as cmd/meshd does.
	var srvPtr atomic.Pointer[api.Server]
	// The meters sample until this context ends, so it lives as long as
	// the node does.
	ctx, cancel := context.WithCancel(context.Background())
	n, err := node.Open(ctx, cfg, node.Options{Observe: func(ev agent.Event) {
		if s := srvPtr.Load(); s != nil {
			s.Served(ev)
		}
	}})
	if err != nil {
		cancel()
		t.Fatalf("opening the node: %v", err)
	}
	a := api.New(n, api.Options{})
	srvPtr.Store(a)
	srv := httptest.NewServer(a)
	t.Cleanup(func() {
		a.Drain() // ends the live streams, so Close does not wait on them
		srv.Close()
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("closing the node: %v", err)
		}
		cancel()
	})
	return &stack{n: n, api: a, srv: srv}
}

// The daemon's mux serves the page at / and its files, while its own
// routes still answer and an unknown path is still 404.
func TestAPIServesPage(t *testing.T) {
	st := startStack(t, 8, movingRail(t).root)
	resp, body := get(t, st.srv.URL+"/", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || resp.Header.Get("Content-Security-Policy") == "" ||
		!strings.Contains(body, "/static/app.js") {
		t.Fatalf("GET /: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, _ := get(t, st.srv.URL+"/static/app.js", nil); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/javascript") {
		t.Fatalf("GET /static/app.js: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp, body := get(t, st.srv.URL+"/v1/backends", nil); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(body, `"ref-mid"`) {
		t.Fatalf("GET /v1/backends behind the page: %d %s", resp.StatusCode, body)
	}
	for _, p := range []string{"/nope", "/v1/nope", "/index.html"} {
		if resp, _ := get(t, st.srv.URL+p, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
}

// chromiumPath is the browser to drive, or "" when none is installed.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	return ""
}

// workFor is the reference engine's work (BLAKE3 rounds per token) that
// takes about d per token on this machine, so a serve's length is set in
// time rather than in rounds that a fast machine would finish at once.
func workFor(d time.Duration) int {
	const n = 20000
	var s [32]byte
	start := time.Now()
	for range n {
		s = blake3.Sum256(s[:])
	}
	per := time.Since(start) / n
	if per <= 0 {
		per = time.Nanosecond
	}
	return max(1, int(d/per))
}

// browser starts a headless Chromium that reaches nothing but loopback
// (the flags turn off its own calls home) and opens a tab.
func browser(t *testing.T, bin string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox, // root in CI containers has no user namespaces
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	// Registered after the stack's cleanup, so it runs first: the
	// browser leaves before the server closes, and its profile directory
	// is free before it is removed.
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	return ctx
}

// thousands formats n as the page does (Intl.NumberFormat("en")).
func thousands(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The live page in a real browser: it loads with no console error, its
// trace grows while a serve runs, each sealed receipt appears with its
// provenance and its figures as the receipt states them, the backends
// table shows configured against learned µJ/token, and a meter that
// freezes is shown unhealthy.
func TestLivePageInChromium(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no chromium binary found; apt-get install chromium to run the live page in a browser")
	}
	if testing.Short() {
		t.Skip("starts a browser")
	}
	// ~100 ms a token: a 24-token serve on ref-mid runs ~2.4 s.
	rl := movingRail(t)
	st := startStack(t, workFor(100*time.Millisecond), rl.root)
	busy := func() bool { return st.api.InFlight() > 0 }
	rl.busy.Store(&busy)
	ctx := browser(t, bin)

	// Every error-level console call, uncaught exception and browser log
	// error (a CSP refusal, a failed load) fails the test.
	var mu sync.Mutex
	var problems []string
	note := func(s string) {
		mu.Lock()
		problems = append(problems, s)
		mu.Unlock()
	}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, a.Description+string(a.Value))
				}
				note("console." + string(ev.Type) + ": " + strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			s := d.Text
			if d.Exception != nil {
				s += " " + d.Exception.Description
			}
			note("exception: " + s)
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError {
				note("log " + string(ev.Entry.Source) + ": " + ev.Entry.Text + " " + ev.Entry.URL)
			}
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	checkConsole := func(when string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("the page's console %s:\n%s", when, strings.Join(problems, "\n"))
		}
	}
	// pageState is what the page shows and said, for a failure message.
	pageState := func() string {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := chromedp.Run(c, chromedp.Evaluate[string](`document.body ? document.body.innerText : "(no body)"`))
		if err != nil {
			body = "(the page cannot be read: " + err.Error() + ")"
		}
		mu.Lock()
		defer mu.Unlock()
		return "page text:\n" + body + "\nconsole:\n" + strings.Join(problems, "\n")
	}
	// do runs actions with a deadline: every wait below ends in a
	// failure, never a hang and never a sleep.
	do := func(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		if err := chromedp.Do(c, actions...); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, pageState())
		}
	}
	// text reads an element's text in one evaluation in the page: the
	// live tables replace their rows as updates arrive, so a node found
	// by one call may be gone by the next (reading it by node id then
	// fails under load). A row missing at that moment is waited for.
	text := func(sel string) string {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		const missing = "\x00missing"
		js := `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); return e ? e.innerText : "\x00missing"; })()`
		for {
			if err := chromedp.Do(c, chromedp.WaitReady(chromedp.CSS(sel))); err != nil {
				t.Fatalf("text of %s: %v", sel, err)
			}
			s, err := chromedp.Run(c, chromedp.Evaluate[string](js))
			if err != nil {
				t.Fatalf("text of %s: %v", sel, err)
			}
			if s != missing {
				return strings.TrimSpace(s)
			}
		}
	}
	points := func() int {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		n, err := chromedp.Run(c, chromedp.Evaluate[int](`Number(document.getElementById("trace").dataset.points)`))
		if err != nil {
			t.Fatalf("reading the trace's point count: %v", err)
		}
		return n
	}
	cl, err := client.New(st.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	serve := func(floor uint8, tokens uint32) *client.Served {
		t.Helper()
		r, err := cl.Serve(context.Background(), client.ServeRequest{Prompt: "how many joules", MaxTokens: tokens, FidelityFloor: &floor})
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
		return r
	}

	// The page loads: the backends, the meter and the first readings.
	do("loading the page", 30*time.Second,
		chromedp.Navigate(st.srv.URL+"/?interval_ms=100"),
		chromedp.WaitVisible(chromedp.CSS(`#backends tr[data-backend="ref-mid"] td.configured`)),
		chromedp.WaitVisible(chromedp.CSS(`#meters li[data-meter="vdd"][data-healthy="true"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#conn.conn-live`)),
	)
	if got := text(`#backends tr[data-backend="ref-mid"] td.configured`); got != "300" {
		t.Errorf("ref-mid configured µJ/token %q, want 300", got)
	}
	if got := text(`#backends tr[data-backend="ref-mid"] td.learned`); got != "—" {
		t.Errorf("ref-mid learned µJ/token before any receipt: %q, want none", got)
	}
	checkConsole("on load")

	// The trace grows while a serve runs: wait for the serve to be in
	// flight, then for five more points, then check it still is.
	served := make(chan *client.Served, 1)
	serveErr := make(chan error, 1)
	go func() {
		floor := uint8(3)
		r, err := cl.Serve(context.Background(), client.ServeRequest{Prompt: "a long metered serve", MaxTokens: 24, FidelityFloor: &floor})
		if err != nil {
			serveErr <- err
			return
		}
		served <- r
	}()
	inFlight := time.NewTicker(2 * time.Millisecond)
	deadline := time.After(30 * time.Second)
	for st.api.InFlight() == 0 {
		select {
		case <-inFlight.C:
		case err := <-serveErr:
			t.Fatalf("the long serve: %v", err)
		case <-deadline:
			t.Fatal("the long serve never started")
		}
	}
	inFlight.Stop()
	p0 := points()
	c, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = chromedp.Run(c, chromedp.Poll[bool](fmt.Sprintf(`Number(document.getElementById("trace").dataset.points) >= %d`, p0+5)))
	cancel()
	if err != nil {
		t.Fatalf("the trace did not grow from %d points: %v", p0, err)
	}
	if st.api.InFlight() == 0 {
		t.Fatalf("the serve ended before the trace had grown by 5 points (from %d): the serve is too short here", p0)
	}
	var long *client.Served
	select {
	case long = <-served:
	case err := <-serveErr:
		t.Fatalf("the long serve: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the long serve did not end")
	}

	// Its receipt appears, with its figures as the receipt states them.
	checkRow := func(s *client.Served) string {
		t.Helper()
		rc := s.Receipt.Receipt
		row := fmt.Sprintf("#receipt-%d", rc.Sequence)
		do("the row of receipt "+strconv.FormatUint(rc.Sequence, 10), 30*time.Second, chromedp.WaitVisible(chromedp.CSS(row)))
		if got := text(row + " td.provenance .prov-" + rc.EnergyProvenance); got != rc.EnergyProvenance {
			t.Errorf("%s provenance %q, want %q", row, got, rc.EnergyProvenance)
		}
		if got := text(row + " td.backend"); got != rc.Backend {
			t.Errorf("%s backend %q, want %q", row, got, rc.Backend)
		}
		want := "—" // no figure where the receipt has none
		if rc.UJPerAcceptedToken != nil {
			want = thousands(*rc.UJPerAcceptedToken)
		}
		if got := text(row + " td.ujpt"); got != want {
			t.Errorf("%s µJ/token %q, want %q", row, got, want)
		}
		got := text(row + " td.error")
		if rc.ErrorUJ == nil && got != "—" || rc.ErrorUJ != nil && !strings.HasPrefix(got, "± ") {
			t.Errorf("%s error bound %q, receipt's %v", row, got, rc.ErrorUJ)
		}
		return rc.EnergyProvenance
	}
	if p := checkRow(long); p == "Estimator" {
		t.Errorf("the metered serve was sealed as %s", p)
	}
	// An unmetered backend's receipt is an estimate, styled as one.
	if p := checkRow(serve(1, 4)); p != "Estimator" {
		t.Errorf("ref-tiny's receipt is %s, want Estimator", p)
	}

	// Two more measured receipts on ref-mid and its cost is learned: the
	// table shows the learned figure beside the configured one.
	checkRow(serve(3, 2))
	checkRow(serve(3, 2))
	do("ref-mid's learned cost", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#backends tr[data-backend="ref-mid"][data-learned="true"] td.learned`)))
	_, body := get(t, st.srv.URL+"/v1/backends", nil)
	var bs struct {
		Backends []struct {
			Name    string
			Routing uint64 `json:"routing_uj_per_token"`
			Learned bool
		}
	}
	if err := json.Unmarshal([]byte(body), &bs); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs.Backends {
		sel := `#backends tr[data-backend="` + b.Name + `"]`
		want := "—"
		if b.Learned {
			want = thousands(b.Routing)
		}
		if got := text(sel + " td.learned"); got != want {
			t.Errorf("%s learned µJ/token %q, want %q", b.Name, got, want)
		}
	}
	if got := text(`#backends tr[data-backend="ref-mid"] td.configured`); got != "300" {
		t.Errorf("ref-mid configured µJ/token %q after learning, want 300", got)
	}
	checkConsole("while serving")

	dir := t.TempDir()
	shot := func(name string) {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		buf, err := chromedp.Run(c, chromedp.FullScreenshot(100)) // 100: PNG
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(buf))
		if err != nil {
			t.Fatalf("the screenshot is not a PNG: %v", err)
		}
		if colours := distinctColours(img, 64); colours < 64 {
			t.Fatalf("the screenshot looks blank: %d colours", colours)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		// For a person to look at: the temp dir goes with the test.
		if out := os.Getenv("MESHD_WEB_SCREENSHOTS"); out != "" {
			if err := os.WriteFile(filepath.Join(out, name), buf, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("screenshot %s: %dx%d", path, img.Bounds().Dx(), img.Bounds().Dy())
	}
	shot("live.png")

	// A meter whose chip has frozen is shown unhealthy.
	rl.freeze()
	do("the frozen meter marked unhealthy", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#meters li[data-meter="vdd"].unhealthy[data-healthy="false"]`)))
	if got := text(`#meters li[data-meter="vdd"] .meter-health`); got != "unhealthy" {
		t.Errorf("frozen meter's health %q", got)
	}
	shot("unhealthy.png")
	checkConsole("at the end")
}

// distinctColours counts the colours of img, stopping at limit.
func distinctColours(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

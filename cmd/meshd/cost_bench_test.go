package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/agent"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/internal/testbin"
)

// BenchmarkDaemonCostPerServe is the daemon's own cost per serve in front
// of a real engine child: the mesh-gguf runner on a small synthesised
// GGUF. Each pair is the same serve twice, once through the in-process
// daemon (HTTP, keep-alive, the whole stack: admission, routing, the
// adapter's hop to the child, sealing with its fsync) and once straight
// to the child (the same /completion body the adapter posts, on a
// keep-alive connection of its own), the order alternating; the cost is
// the median of the per-pair differences, so the engine's own time and
// the machine's drift cancel.
//
// Where it goes, from the agent's phase timings of the same serves
// (agent.Phases) and a write+fsync of a receipt-sized frame beside the
// state dir, interleaved with the pairs:
//   - http+json: the daemon's reply time less the agent's (the HTTP
//     server, JSON in and out, the receipt's encoding in the reply);
//   - admit, grant, route, settle: the agent's phases;
//   - hop to the engine: the engine phase less the paired direct call
//     (the slot, the adapter's request and response, its checks);
//   - seal: the seal phase less one fsync (signing, CBOR, the append);
//   - fsync: the write+fsync measured beside it.
//
// Reported: cost-median-µs (target ≤ 500), direct-median-µs, and each
// row's median; printed besides, the cost with the fsync measured here
// replaced by the reference machine's 110 µs (a reading aid for a loaded
// machine, whose disk alone can pass the target: the verdict is the raw
// figure's).
func BenchmarkDaemonCostPerServe(b *testing.B) {
	// quietFsync is a write+fsync of a receipt-sized frame on the quiet
	// reference machine the target was set on.
	const quietFsync = 110 * time.Microsecond
	runner := testbin.Build(b, "meshd/cmd/mesh-gguf")
	dir := b.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	f, err := os.Create(model)
	if err != nil {
		b.Fatal(err)
	}
	if err := gguf.Synth(f, gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}, 7); err != nil {
		b.Fatal(err)
	}
	f.Close()

	var mu sync.Mutex
	var last agent.Event
	hooks := serveHooks{}
	hooks.opts.Observe = func(ev agent.Event) {
		mu.Lock()
		last = ev
		mu.Unlock()
	}
	d := benchDaemonWith(b, fmt.Sprintf(`
[[backend]]
name = "gguf"
kind = "mesh-gguf"
runner = %q
model = %q
context = 256
threads = 1
fidelity = 1
uj_per_token = 40
`, runner, model), hooks)
	var child string
	for _, bk := range d.node.Backends() {
		if e, ok := bk.Engine.(*subprocess.Engine); ok {
			child = e.URL()
		}
	}
	if child == "" {
		b.Fatal("no engine child")
	}
	base := "http://" + d.addrs[0].String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer hc.CloseIdleConnections()
	defer direct.CloseIdleConnections()
	const maxTokens = 4

	post := func(c *http.Client, url string, body []byte, want string) time.Duration {
		t0 := time.Now()
		resp, err := c.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(want)) {
			b.Fatalf("%s: %v %d %s", url, err, resp.StatusCode, data)
		}
		return el
	}
	viaDaemon := func(prompt string) (time.Duration, agent.Phases) {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
		el := post(hc, base+"/v1/serve", body, `"envelope":`)
		mu.Lock()
		defer mu.Unlock()
		if last.Sealed == nil {
			b.Fatalf("the serve's event: %+v", last)
		}
		return el, last.Phases
	}
	// The body the adapter posts (engine/subprocess completionRequest).
	straight := func(prompt string) time.Duration {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": maxTokens, "cache_prompt": true,
			"temperature": 0, "seed": 0, "return_tokens": true})
		return post(direct, child+"/completion", body, `"tokens_predicted"`)
	}
	sf, err := os.OpenFile(filepath.Join(dir, "fsync-probe"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	frame := make([]byte, 830) // a receipt's bytes in the log
	fsync := func() time.Duration {
		t0 := time.Now()
		if _, err := sf.Write(frame); err != nil {
			b.Fatal(err)
		}
		if err := sf.Sync(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	prompt := func(i int) string { return fmt.Sprintf("the quick brown fox %d", i) }
	for i := range 20 { // warm up: connections, the child's caches, the log
		viaDaemon(prompt(i))
		straight(prompt(i))
	}

	n := max(b.N, 30)
	var cost, directs, httpJSON, admit, grant, route, hop, seal, settle, syncs []time.Duration
	b.ResetTimer()
	for i := range n {
		p := prompt(1000 + i)
		var dt, st time.Duration
		var ph agent.Phases
		if i%2 == 0 {
			dt, ph = viaDaemon(p)
			st = straight(p)
		} else {
			st = straight(p)
			dt, ph = viaDaemon(p)
		}
		syncs = append(syncs, fsync())
		inAgent := ph.Admit + ph.Grant + ph.Route + ph.Engine + ph.Seal + ph.Settle
		cost = append(cost, dt-st)
		directs = append(directs, st)
		httpJSON = append(httpJSON, dt-inAgent)
		admit, grant, route = append(admit, ph.Admit), append(grant, ph.Grant), append(route, ph.Route)
		hop, seal, settle = append(hop, ph.Engine-st), append(seal, ph.Seal), append(settle, ph.Settle)
	}
	b.StopTimer()

	med := func(xs []time.Duration) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return percentile(s, 0.5)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fs := med(syncs)
	rows := []struct {
		name string
		v    time.Duration
	}{
		{"http+json", med(httpJSON)},
		{"admit", med(admit)},
		{"grant+hold", med(grant)},
		{"route", med(route)},
		{"hop to the engine", med(hop)},
		{"seal (sign, append)", med(seal) - fs},
		{"fsync", fs},
		{"settle", med(settle)},
	}
	c := med(cost)
	b.ReportMetric(us(c), "cost-median-µs")
	b.ReportMetric(us(med(directs)), "direct-median-µs")
	var sb strings.Builder
	verdict := "met"
	if c > 500*time.Microsecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "daemon cost per serve in front of mesh-gguf over %d pairs: median %.0f µs (direct %.0f µs); target ≤ 500 µs: %s\n",
		n, us(c), us(med(directs)), verdict)
	// The fsync is the disk's, not the daemon's: on a loaded machine it
	// alone can pass the target. The cost is also stated with the fsync
	// measured here replaced by the reference machine's, as a reading aid;
	// the verdict is the raw figure's.
	ref := quietFsync
	fmt.Fprintf(&sb, "  with the fsync measured here (%.0f µs) replaced by a quiet machine's %.0f µs (a reference, not measured): %.0f µs\n",
		us(fs), us(ref), us(c-fs+ref))
	for _, r := range rows {
		fmt.Fprintf(&sb, "  %-20s %7.1f µs\n", r.name, us(r.v))
	}
	fmt.Fprintf(&sb, "  (rows are medians of their own; they need not add up to the median cost)\n")
	// Printed, not logged: go test cuts a benchmark's log to a few lines.
	// go test's first round (b.N = 1) is calibration, not worth a table.
	if b.N > 1 {
		fmt.Print(sb.String())
	}
}

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
	"syscall"
	"testing"
	"time"

	"meshd/agent"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/internal/testbin"
	"meshd/steward"
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
// (agent.Phases, and the steward's steward.SealTimes within the seal) and
// a bare write+fdatasync of a receipt-sized frame beside the state dir,
// interleaved with the pairs:
//   - http+json: the daemon's reply time less the agent's (the HTTP
//     client and server, JSON in and out, the receipt's encoding in the
//     reply);
//   - admit, grant+hold, route, settle: the agent's phases;
//   - hop to the engine: the engine phase less the paired direct call
//     (the slot, the adapter's request and response, its checks);
//   - seal: build (the receipt and its CBOR), sign (Ed25519), append (the
//     frame's write), fsync (the log's own), and the rest of the seal
//     phase (nonce, the log's lock, the chain's bookkeeping);
//   - the bare write+fdatasync: what the disk alone takes for a durable
//     frame, the floor under the log's fsync.
//
// Reported: cost-median-µs (target ≤ 500), direct-median-µs,
// fsync-median-µs (the bare baseline) and cost-less-fsync-median-µs: the
// median over pairs of the cost less the baseline fsync measured right
// after it, the daemon's own cost with the disk taken out. A loaded
// machine's disk alone can pass the target; the verdict is the raw
// figure's, the rest says why.
func BenchmarkDaemonCostPerServe(b *testing.B) {
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
	viaDaemon := func(prompt string) (time.Duration, agent.Phases, steward.SealTimes) {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
		el := post(hc, base+"/v1/serve", body, `"envelope":`)
		mu.Lock()
		defer mu.Unlock()
		if last.Sealed == nil {
			b.Fatalf("the serve's event: %+v", last)
		}
		return el, last.Phases, last.Sealed.Took
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
		if err := syscall.Fdatasync(int(sf.Fd())); err != nil {
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
	var cost, lessFsync, directs, syncs []time.Duration
	rows := make([][]time.Duration, len(costRows))
	b.ResetTimer()
	for i := range n {
		p := prompt(1000 + i)
		var dt, st time.Duration
		var ph agent.Phases
		var sk steward.SealTimes
		if i%2 == 0 {
			dt, ph, sk = viaDaemon(p)
			st = straight(p)
		} else {
			st = straight(p)
			dt, ph, sk = viaDaemon(p)
		}
		fs := fsync()
		inAgent := ph.Admit + ph.Grant + ph.Route + ph.Engine + ph.Seal + ph.Settle
		cost, directs, syncs = append(cost, dt-st), append(directs, st), append(syncs, fs)
		lessFsync = append(lessFsync, dt-st-fs)
		for j, v := range []time.Duration{dt - inAgent, ph.Admit, ph.Grant, ph.Route, ph.Engine - st,
			sk.Build, sk.Sign, sk.Write, sk.Fsync, ph.Seal - sk.Build - sk.Sign - sk.Write - sk.Fsync, ph.Settle} {
			rows[j] = append(rows[j], v)
		}
	}
	b.StopTimer()

	med := func(xs []time.Duration) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return percentile(s, 0.5)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	c, fs := med(cost), med(syncs)
	b.ReportMetric(us(c), "cost-median-µs")
	b.ReportMetric(us(med(directs)), "direct-median-µs")
	b.ReportMetric(us(fs), "fsync-median-µs")
	b.ReportMetric(us(med(lessFsync)), "cost-less-fsync-median-µs")
	var sb strings.Builder
	verdict := "met"
	if c > 500*time.Microsecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "daemon cost per serve in front of mesh-gguf over %d pairs: median %.0f µs (direct %.0f µs); target ≤ 500 µs: %s\n",
		n, us(c), us(med(directs)), verdict)
	fmt.Fprintf(&sb, "  a bare write+fdatasync of a receipt-sized frame here: %.0f µs; the cost less it (median over pairs): %.0f µs\n",
		us(fs), us(med(lessFsync)))
	for j, name := range costRows {
		fmt.Fprintf(&sb, "  %-28s %7.1f µs\n", name, us(med(rows[j])))
	}
	fmt.Fprintf(&sb, "  (rows are medians of their own; they need not add up to the median cost)\n")
	// Printed, not logged: go test cuts a benchmark's log to a few lines.
	// go test's first round (b.N = 1) is calibration, not worth a table.
	if b.N > 1 {
		fmt.Print(sb.String())
	}
}

// costRows name the breakdown's rows, in the order they are measured.
var costRows = []string{"http+json", "admit", "grant+hold", "route", "hop to the engine",
	"seal: build (receipt, CBOR)", "seal: sign (Ed25519)", "seal: append (write)", "seal: fsync (the log's)", "seal: rest", "settle"}

//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkServeRoundTrip is the adapter's own cost per serve (request
// encoding, loopback HTTP, response checks) against a runner that does no
// inference: the overhead added to every metered window.
func BenchmarkServeRoundTrip(b *testing.B) {
	cfg := Config{
		Runner: fakeBin, Model: writeModelB(b), Fidelity: 1, UJPerToken: 1,
		HealthInterval: 10 * time.Millisecond, StopGrace: time.Second,
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer e.Stop(context.Background())
	req, p := request("a prompt of a few words", 16)
	ctx := context.Background()
	start := time.Now()
	for b.Loop() {
		if _, err := e.Serve(ctx, req, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/serve")
}

// BenchmarkParseCompletion is the response validation and mapping alone.
func BenchmarkParseCompletion(b *testing.B) {
	body := []byte(`{"content":"abcdefghijklmnop","tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],
		"tokens_predicted":16,"tokens_evaluated":24,"tokens_cached":40,"stop":true,"stop_type":"limit",
		"truncated":false,"timings":{"cache_n":20,"prompt_n":4,"prompt_ms":1.5,"predicted_n":16,
		"predicted_ms":9.1,"draft_n":20,"draft_n_accepted":12}}`)
	for b.Loop() {
		if _, _, err := parseCompletion(body, 16, true); err != nil {
			b.Fatal(err)
		}
	}
}

func writeModelB(b *testing.B) string {
	p := b.TempDir() + "/model.gguf"
	if err := os.WriteFile(p, []byte("benchmark weights"), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkServeHop is what the adapter adds to a /completion exchange
// with its child: pairs of the same serve through Serve and as a plain
// POST of the same body on a keep-alive client of its own, the order
// alternating, against the fake runner (which does no inference). The
// median of the per-pair differences is the adapter's own cost: its
// checks, the request's encoding, the answer's reading and mapping, and
// the transport's difference from a default one.
func BenchmarkServeHop(b *testing.B) {
	cfg := Config{
		Runner: fakeBin, Model: writeModelB(b), Fidelity: 1, UJPerToken: 1,
		HealthInterval: 10 * time.Millisecond, StopGrace: time.Second,
	}
	e, err := New(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer e.Stop(context.Background())
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer direct.CloseIdleConnections()
	ctx := context.Background()
	const maxTokens = 4
	serve := func(p string) time.Duration {
		req, pb := request(p, maxTokens)
		t0 := time.Now()
		if _, err := e.Serve(ctx, req, pb); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	plain := func(p string) time.Duration {
		body, _ := json.Marshal(map[string]any{"prompt": p, "n_predict": maxTokens, "cache_prompt": true,
			"temperature": 0, "seed": 0, "return_tokens": true})
		t0 := time.Now()
		resp, err := direct.Post(e.URL()+"/completion", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%v %d %s", err, resp.StatusCode, data)
		}
		return time.Since(t0)
	}
	for i := range 20 {
		serve(fmt.Sprintf("warm up %d", i))
		plain(fmt.Sprintf("warm up %d", i))
	}
	n := max(b.N, 30)
	var diff, directs []time.Duration
	b.ResetTimer()
	for i := range n {
		p := fmt.Sprintf("a prompt of a few words %d", i)
		var s, d time.Duration
		if i%2 == 0 {
			s = serve(p)
			d = plain(p)
		} else {
			d = plain(p)
			s = serve(p)
		}
		diff, directs = append(diff, s-d), append(directs, d)
	}
	b.StopTimer()
	med := func(xs []time.Duration) float64 {
		slices.Sort(xs)
		return float64(xs[len(xs)/2]) / float64(time.Microsecond)
	}
	b.ReportMetric(med(diff), "hop-median-µs")
	b.ReportMetric(med(directs), "direct-median-µs")
}

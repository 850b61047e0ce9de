//go:build unix

package subprocess

import (
	"context"
	"os"
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

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A serve still running at the drain deadline is cut: its client gets a
// clean 503 shutting_down body (not a cut connection), nothing is sealed
// for it, and the daemon stops within shutdown_timeout instead of waiting
// the serve out.
func TestDrainCutsALongServe(t *testing.T) {
	dir := t.TempDir()
	cfg := fmt.Sprintf(`[steward]
state_dir = %q

[listen]
tcp = ["127.0.0.1:0"]
serve_timeout = "5m"
shutdown_timeout = "1s"

[[backend]]
name = "slow"
kind = "reference"
fidelity = 1
uj_per_token = 1
work = 50000
`, filepath.Join(dir, "state"))
	path := filepath.Join(dir, "meshd.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	td := runDaemon(t, dir, path, serveHooks{})

	type answer struct {
		status int
		body   []byte
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		// 4096 tokens of 50 000 hashes each: minutes of work.
		b, _ := json.Marshal(map[string]any{"prompt": "a long one", "max_tokens": 4096})
		resp, err := http.Post(td.base+"/v1/serve", "application/json", bytes.NewReader(b))
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, data, err}
	}()
	for td.d.api.InFlight() == 0 {
		select {
		case a := <-got:
			t.Fatalf("the serve ended before the drain: %d %s %v", a.status, a.body, a.err)
		case <-time.After(time.Millisecond):
		}
	}
	log := td.d.node.Stores.Log
	start := time.Now()
	if err := td.stop(); err != nil {
		t.Fatalf("stop: %v\n%s", err, td.logs.String())
	}
	took := time.Since(start)
	a := <-got
	var body struct {
		Error struct{ Code, Type, Message string }
	}
	if a.err != nil || a.status != http.StatusServiceUnavailable || json.Unmarshal(a.body, &body) != nil ||
		body.Error.Code != "shutting_down" || body.Error.Type != "server_error" {
		t.Fatalf("the cut serve's client got %d %s %v; want 503 shutting_down\n%s", a.status, a.body, a.err, td.logs.String())
	}
	if n := log.Durable(); n != 0 {
		t.Fatalf("%d receipts sealed for a serve cut short", n)
	}
	// The drain is bounded by shutdown_timeout; closing the node after it
	// is the log's sync. Ten seconds is a hang, not a slow machine.
	if took > 10*time.Second {
		t.Fatalf("stopping took %v with shutdown_timeout 1s", took)
	}
	t.Logf("stopped in %v; the client read: %s", took.Round(time.Millisecond), bytes.TrimSpace(a.body))
}

func TestDrainPhases(t *testing.T) {
	for _, tc := range []struct{ timeout, cut, close time.Duration }{
		{30 * time.Second, 28 * time.Second, 29 * time.Second},
		{5 * time.Second, 4500 * time.Millisecond, 4750 * time.Millisecond},
		{time.Second, 750 * time.Millisecond, 875 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond},
	} {
		if cut, cl := drainPhases(tc.timeout); cut != tc.cut || cl != tc.close {
			t.Errorf("drainPhases(%v) = %v, %v; want %v, %v", tc.timeout, cut, cl, tc.cut, tc.close)
		}
	}
}

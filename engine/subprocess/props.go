package subprocess

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// readContext asks the healthy child for the context it runs with: GET
// /props, whose default_generation_settings.n_ctx (llama-server and
// mesh-gguf alike; older servers put n_ctx at the top) is the context of
// one slot, the most a serve can fill. 0 when the child does not say:
// the cap then falls back to the configured context size.
func readContext(ctx context.Context, client *http.Client, base string) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/props", nil)
	if err != nil {
		return 0
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0
	}
	var p struct {
		NCtx     int `json:"n_ctx"`
		Defaults struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&p); err != nil {
		return 0
	}
	if p.Defaults.NCtx > 0 {
		return p.Defaults.NCtx
	}
	return max(p.NCtx, 0)
}

// URL is the running child's HTTP base (http://127.0.0.1:port), "" while
// none is healthy: for benchmarks that call the child directly, beside
// the engine.
func (e *Engine) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return ""
	}
	return e.cur.base
}

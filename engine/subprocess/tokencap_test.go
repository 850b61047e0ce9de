//go:build unix

package subprocess

import (
	"errors"
	"testing"

	"meshd/engine"
	"meshd/wire"
)

// The cap follows the context the child states in /props, lowered by
// Config.MaxTokens; a max_tokens over it, or over what the child's
// 32-bit n_predict can hold, is refused before the child sees it.
func TestTokenCap(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		name      string
		ctx       int    // the child's -c, which its /props states
		props     bool   // the fake serves /props (only with -c)
		maxTokens uint32 // Config.MaxTokens
		want      uint32
	}{
		{"context from /props", 300, true, 0, 300},
		{"configured below the context", 300, true, 100, 100},
		{"configured above the context", 300, true, 1000, 300},
		{"no context stated", 0, false, 0, engine.MaxEngineTokens},
		{"no context, configured", 0, false, 64, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.ContextSize, cfg.MaxTokens = tc.ctx, tc.maxTokens
			e := startEngine(t, cfg)
			if tc.props && e.nCtx != tc.ctx {
				t.Fatalf("context read from /props = %d, want %d", e.nCtx, tc.ctx)
			}
			if got := e.TokenCap(); got != tc.want {
				t.Fatalf("TokenCap = %d, want %d", got, tc.want)
			}
			at, p := request("fits", min(tc.want, 8))
			if _, err := e.Serve(serveCtx(t), at, p); err != nil {
				t.Fatalf("serve within the cap: %v", err)
			}
			over := uint64(tc.want) + 1
			if over > 1<<32-1 {
				t.Fatal("cap at the uint32 limit")
			}
			req, p := request("too long", uint32(over))
			_, err := e.Serve(serveCtx(t), req, p)
			if !errors.Is(err, engine.ErrTooManyTokens) || !errors.Is(err, wire.ErrBadRequest) {
				t.Fatalf("max_tokens %d over cap %d: %v", over, tc.want, err)
			}
		})
	}
}

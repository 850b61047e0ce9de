package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api/apitest"
	"meshd/agent/node"
)

// Bounded work over HTTP: a request over a cap is a 400 in OpenAI's
// error shape, param the body's field, the message naming the value and
// the cap; nothing is sealed for it.
func TestOverLimitRefusals(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends+"max_tokens = 64\n[limits]\nmax_joule_ceiling_uj = 5000000000\n", node.Options{})
	post := func(path string, body map[string]any) (int, map[string]map[string]any) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(st.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	chat := []map[string]string{{"role": "user", "content": "hi"}}
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		param, msg string
	}{
		// ref-tiny states 4096 (the reference default), ref-mid 64.
		{"serve, max_tokens 2^31", "/v1/serve", map[string]any{"prompt": "p", "max_tokens": int64(1 << 31)}, "max_tokens",
			"max_tokens 2147483648 is over the largest of 2 backends at F0 or above (ref-tiny)'s cap of 4096"},
		{"serve, max_tokens 2^32-1", "/v1/serve", map[string]any{"prompt": "p", "max_tokens": int64(1<<32 - 1)}, "max_tokens", "cap of 4096"},
		{"serve, ceiling 2^64-1", "/v1/serve", map[string]any{"prompt": "p", "joule_ceiling_uj": uint64(1<<64 - 1)}, "joule_ceiling_uj",
			"joule_ceiling_uj 18446744073709551615 is over this node's cap of 5000000000"},
		{"completions", "/v1/completions", map[string]any{"prompt": "p", "max_tokens": 5000}, "max_tokens", "cap of 4096"},
		{"chat, max_completion_tokens", "/v1/chat/completions", map[string]any{"messages": chat, "max_completion_tokens": 5000}, "max_completion_tokens", "cap of 4096"},
		{"chat streamed, ceiling", "/v1/chat/completions", map[string]any{"messages": chat, "stream": true, "joule_ceiling_uj": int64(5000000001)}, "joule_ceiling_uj", "cap of 5000000000"},
		{"floor leaves only the short backend", "/v1/serve", map[string]any{"prompt": "p", "max_tokens": 65, "fidelity_floor": 3}, "max_tokens",
			"over backend ref-mid's cap of 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, out := post(tc.path, tc.body)
			e := out["error"]
			if status != http.StatusBadRequest || e["param"] != tc.param || e["code"] != "over_limit" || e["type"] != "invalid_request_error" ||
				!strings.Contains(fmt.Sprint(e["message"]), tc.msg) {
				t.Fatalf("%d %v; want 400 over_limit param %s, message with %q", status, e, tc.param, tc.msg)
			}
		})
	}
	if n := st.Node.Stores.Log.Durable(); n != 0 {
		t.Fatalf("%d receipts sealed for refused serves", n)
	}
	// Within the caps it serves.
	if status, out := post("/v1/serve", map[string]any{"prompt": "p", "max_tokens": 64, "fidelity_floor": 3}); status != 200 {
		t.Fatalf("within the caps: %d %v", status, out)
	}
}

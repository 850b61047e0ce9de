package api_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api/apitest"
	"meshd/agent/node"
)

// getJSON is GET url decoded as a JSON object.
func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return out
}

// TestChainHeadFollowsSeals: /v1/chain/head names the receipt the last
// serve sealed, its sequence and the count, after every serve, and
// nothing of a head on an empty chain.
func TestChainHeadFollowsSeals(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	head := getJSON(t, st.URL+"/v1/chain/head")
	if head["receipts"] != 0.0 || head["head"] != nil || head["sequence"] != nil || head["steward"] != st.Node.Key.ID() {
		t.Fatalf("empty chain's head: %v", head)
	}
	for i, prompt := range []string{"one", "two", "three"} {
		_, out := postJSON(t, st.URL+"/v1/completions", `{"prompt":"`+prompt+`","max_tokens":2}`)
		rc := out["receipt"].(map[string]any)
		head := getJSON(t, st.URL+"/v1/chain/head")
		if head["head"] != rc["id"] || head["sequence"] != rc["sequence"] || head["receipts"] != rc["sequence"].(float64)+1 || rc["sequence"] != float64(i) {
			t.Fatalf("after serve %d (receipt %v at %v): head %v", i, rc["id"], rc["sequence"], head)
		}
	}
}

// TestOpenAIUsageCachedTokens: usage.prompt_tokens_details.cached_tokens
// is the receipt's cache_hit_tokens, whole and streamed, on both
// endpoints.
func TestOpenAIUsageCachedTokens(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	check := func(what string, out map[string]any) {
		t.Helper()
		u, _ := out["usage"].(map[string]any)
		d, _ := u["prompt_tokens_details"].(map[string]any)
		rc, _ := out["receipt"].(map[string]any)
		fields, _ := rc["receipt"].(map[string]any)
		want, ok := fields["cache_hit_tokens"].(float64)
		if got, has := d["cached_tokens"].(float64); !ok || !has || got != want || u["prompt_tokens"] != fields["tokens_in"] {
			t.Fatalf("%s: usage %v, receipt %v", what, u, fields)
		}
	}
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `"prompt":"cached or not"`},
		{"/v1/chat/completions", msgs},
	} {
		_, out := postJSON(t, st.URL+c.path, `{`+c.body+`,"max_tokens":3}`)
		check(c.path, out)

		resp, err := http.Post(st.URL+c.path, "application/json", strings.NewReader(`{`+c.body+`,"max_tokens":3,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		var last map[string]any
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ev map[string]any
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("%s streamed: %v: %s", c.path, err, data)
			}
			if ev["usage"] != nil {
				last = ev
			}
		}
		resp.Body.Close()
		if last == nil {
			t.Fatalf("%s streamed: no event with usage", c.path)
		}
		check(c.path+" streamed", last)
	}
}

package llamaserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"
)

type slotResp struct {
	Tokens          []int `json:"tokens"`
	IDSlot          int   `json:"id_slot"`
	TokensEvaluated int   `json:"tokens_evaluated"`
	Timings         struct {
		CacheN  int `json:"cache_n"`
		PromptN int `json:"prompt_n"`
	} `json:"timings"`
}

// seqPrompt is a token-array prompt: BOS, then n tokens from first on
// (no BOS is added to an array).
func seqPrompt(first, n int) []int {
	p := []int{1}
	for i := range n {
		p = append(p, first+i)
	}
	return p
}

// TestSlotsKeepTheirConversations: with two slots, each conversation
// comes back to the slot that caches it. A prompt that shares only BOS
// with a busy slot's cache takes the idle empty slot instead of evicting
// that conversation, and a prompt sharing a good part of one slot's cache
// takes that slot even when the other has been idle longer. Every cached
// run gives the tokens of the run that filled the cache.
func TestSlotsKeepTheirConversations(t *testing.T) {
	f, ts, _ := newDecodeServer(t, 2, 128, nil)
	f.readyForTest(t)
	a, b := seqPrompt(10, 29), seqPrompt(200, 29)
	c := append(append([]int{}, b[:11]...), seqPrompt(300, 19)[1:]...) // 11 of b's 30 tokens, then its own
	serve := func(prompt []int) slotResp {
		t.Helper()
		var r slotResp
		body := map[string]any{"prompt": prompt, "n_predict": 6, "temperature": 0, "ignore_eos": true, "return_tokens": true}
		if code := post(t, ts.URL+"/completion", body, &r); code != 200 {
			t.Fatalf("status %d", code)
		}
		if r.TokensEvaluated != len(prompt) || r.Timings.CacheN+r.Timings.PromptN != len(prompt) {
			t.Fatalf("tokens_evaluated %d, cache_n %d + prompt_n %d, for a %d-token prompt",
				r.TokensEvaluated, r.Timings.CacheN, r.Timings.PromptN, len(prompt))
		}
		return r
	}
	var got [][]int
	for _, step := range []struct {
		name         string
		prompt       []int
		slot, cacheN int
		same         int // index of the earlier step whose tokens it must repeat (-1: none)
	}{
		{"a, both slots empty", a, 0, 0, -1},
		{"b shares only BOS with a", b, 1, 0, -1},
		{"a again", a, 0, len(a) - 1, 0},
		{"b again", b, 1, len(b) - 1, 1},
		{"c shares 11 of 30 tokens with b", c, 1, 11, -1},
	} {
		r := serve(step.prompt)
		if r.IDSlot != step.slot || r.Timings.CacheN != step.cacheN {
			t.Fatalf("%s: slot %d cache_n %d, want slot %d cache_n %d", step.name, r.IDSlot, r.Timings.CacheN, step.slot, step.cacheN)
		}
		t.Logf("%s: slot %d, cache_n %d, prompt_n %d", step.name, r.IDSlot, r.Timings.CacheN, r.Timings.PromptN)
		got = append(got, r.Tokens)
		if step.same >= 0 && !reflect.DeepEqual(r.Tokens, got[step.same]) {
			t.Fatalf("%s: %v, the run that filled the cache gave %v", step.name, r.Tokens, got[step.same])
		}
	}
}

// TestSlotsCachedEqualsUncached: on two slots, interleaved conversations
// that reuse their caches generate what the same prompts generate with
// cache_prompt false.
func TestSlotsCachedEqualsUncached(t *testing.T) {
	f, ts, _ := newDecodeServer(t, 2, 128, nil)
	f.readyForTest(t)
	a, b := seqPrompt(10, 29), seqPrompt(200, 29)
	longer := append(append([]int{}, a...), seqPrompt(50, 12)[1:]...)
	run := func(prompt []int, cache bool) slotResp {
		t.Helper()
		var r slotResp
		body := map[string]any{"prompt": prompt, "n_predict": 8, "temperature": 0, "ignore_eos": true,
			"return_tokens": true, "cache_prompt": cache}
		if code := post(t, ts.URL+"/completion", body, &r); code != 200 {
			t.Fatalf("status %d", code)
		}
		return r
	}
	for i, p := range [][]int{a, b, a, b, longer, a} {
		cached := run(p, true)
		fresh := run(p, false)
		if fresh.Timings.CacheN != 0 || !reflect.DeepEqual(cached.Tokens, fresh.Tokens) || len(cached.Tokens) != 8 {
			t.Fatalf("request %d: cached (cache_n %d) %v, uncached (cache_n %d) %v",
				i, cached.Timings.CacheN, cached.Tokens, fresh.Timings.CacheN, fresh.Tokens)
		}
	}
}

// TestSlotSimilarityOff: a negative SlotPromptSimilarity (llama-server's
// --slot-prompt-similarity 0) always takes the slot idle the longest.
func TestSlotSimilarityOff(t *testing.T) {
	f, ts, _ := newDecodeServer(t, 2, 128, func(s *Server) { s.SlotPromptSimilarity = -1 })
	f.readyForTest(t)
	a := seqPrompt(10, 29)
	for i, want := range []struct{ slot, cacheN int }{{0, 0}, {1, 0}, {0, len(a) - 1}} {
		var r slotResp
		post(t, ts.URL+"/completion", map[string]any{"prompt": a, "n_predict": 2, "temperature": 0, "ignore_eos": true}, &r)
		if r.IDSlot != want.slot || r.Timings.CacheN != want.cacheN {
			t.Fatalf("request %d: slot %d cache_n %d, want slot %d cache_n %d", i, r.IDSlot, r.Timings.CacheN, want.slot, want.cacheN)
		}
	}
}

// TestChatReportsCachedTokens: a repeated chat reports the prompt tokens
// it reused as llama-server does, in timings.cache_n and in OpenAI's
// usage.prompt_tokens_details.cached_tokens, plain and streamed.
func TestChatReportsCachedTokens(t *testing.T) {
	f, ts, _ := newServerN(t, 1, 128, nil)
	f.readyForTest(t)
	type chatCounts struct {
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Timings struct {
			CacheN  int `json:"cache_n"`
			PromptN int `json:"prompt_n"`
		} `json:"timings"`
	}
	msgs := []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}}
	body := map[string]any{"messages": msgs, "max_tokens": 3, "temperature": 0, "ignore_eos": true}
	var cold, warm chatCounts
	for _, out := range []*chatCounts{&cold, &warm} {
		if code := post(t, ts.URL+"/v1/chat/completions", body, out); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	n := cold.Usage.PromptTokens
	if n < 2 || cold.Timings.CacheN != 0 || cold.Usage.PromptTokensDetails.CachedTokens != 0 ||
		warm.Timings.CacheN != n-1 || warm.Usage.PromptTokensDetails.CachedTokens != n-1 || warm.Timings.PromptN != 1 {
		t.Fatalf("cold %+v, repeated %+v: want 0 then %d cached tokens", cold, warm, n-1)
	}

	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(body)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	events := sseEvents(t, raw)
	if len(events) < 2 {
		t.Fatalf("events %q", events)
	}
	var last chatCounts
	if err := json.Unmarshal([]byte(events[len(events)-2]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Timings.CacheN != n-1 || last.Usage.PromptTokensDetails.CachedTokens != n-1 {
		t.Fatalf("streamed repeat's last event %+v (%s): want %d cached tokens", last, events[len(events)-2], n-1)
	}
}

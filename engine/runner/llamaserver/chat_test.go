package llamaserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta        map[string]any `json:"delta"`
		FinishReason *string        `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage `json:"usage"`
}

// checkChat sends msgs to /v1/chat/completions, plain and streamed, and
// checks both against /completion of the prompt the template should give.
func checkChat(t *testing.T, url string, msgs []map[string]string, wantPrompt string, wantPromptTokens int) {
	t.Helper()
	base := map[string]any{"messages": msgs, "max_tokens": 5, "temperature": 0, "ignore_eos": true, "cache_prompt": false}
	var c chatResp
	if code := post(t, url+"/v1/chat/completions", base, &c); code != 200 {
		t.Fatalf("chat: %d", code)
	}
	var ref compResp
	post(t, url+"/completion", map[string]any{"prompt": wantPrompt, "n_predict": 5, "temperature": 0, "ignore_eos": true, "cache_prompt": false}, &ref)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || len(c.Choices) != 1 ||
		c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content != ref.Content ||
		c.Choices[0].FinishReason == nil || *c.Choices[0].FinishReason != "length" ||
		c.Usage == nil || c.Usage.PromptTokens != wantPromptTokens || c.Usage.CompletionTokens != 5 || c.Usage.TotalTokens != wantPromptTokens+5 {
		t.Fatalf("chat %+v (usage %+v), want content %q and %d prompt tokens", c, c.Usage, ref.Content, wantPromptTokens)
	}

	base["stream"] = true
	base["stream_options"] = map[string]any{"include_usage": true}
	b, _ := json.Marshal(base)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", resp.Header.Get("Content-Type"))
	}
	events := sseEvents(t, body)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var text strings.Builder
	for i, ev := range events[:len(events)-1] {
		var ch chatResp
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ch.Object != "chat.completion.chunk" || ch.ID == "" || len(ch.Choices) != 1 {
			t.Fatalf("event %d: %s", i, ev)
		}
		d := ch.Choices[0].Delta
		switch {
		case i == 0:
			if d["role"] != "assistant" || ch.Choices[0].FinishReason != nil {
				t.Errorf("first chunk %s", ev)
			}
		case i == len(events)-2:
			if len(d) != 0 || ch.Choices[0].FinishReason == nil || *ch.Choices[0].FinishReason != "length" ||
				ch.Usage == nil || ch.Usage.PromptTokens != wantPromptTokens {
				t.Errorf("last chunk %s", ev)
			}
		default:
			s, _ := d["content"].(string)
			if s == "" || ch.Choices[0].FinishReason != nil {
				t.Errorf("content chunk %s", ev)
			}
			text.WriteString(s)
		}
	}
	if text.String() != ref.Content {
		t.Errorf("streamed %q, want %q", text.String(), ref.Content)
	}
}

func TestChatCompletionsChatMLFallback(t *testing.T) {
	f, ts, m := newServerN(t, 1, 128, nil)
	f.readyForTest(t)
	msgs := []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}}
	want := "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
	checkChat(t, ts.URL, msgs, want, len(m.Tok.Encode(want, true, true)))
}

func TestChatCompletionsErrors(t *testing.T) {
	f, ts, _ := newServer(t)
	acq := countAcquires(f.srv)
	f.readyForTest(t)
	for name, body := range map[string]string{
		"no messages":  `{}`,
		"empty":        `{"messages":[]}`,
		"no role":      `{"messages":[{"content":"hi"}]}`,
		"bad content":  `{"messages":[{"role":"user","content":3}]}`,
		"n":            `{"messages":[{"role":"user","content":"hi"}],"n":2}`,
		"over context": `{"messages":[{"role":"user","content":"` + strings.Repeat("zq ", 5000) + `"}]}`,
	} {
		code, raw := postRaw(t, ts.URL+"/v1/chat/completions", body)
		if e := decodeErr(t, raw); code != 400 || e.Code != 400 || e.Type == "" {
			t.Errorf("%s: %d %+v", name, code, e)
		}
	}
	if acq.Load() != 0 {
		t.Error("a refused chat request took a slot")
	}
}

// A Jinja template from the model is rendered through the endpoint; its
// leading bos_token is dropped because the tokenizer adds BOS.
func TestChatCompletionsJinjaTemplate(t *testing.T) {
	tpl := "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}" +
		"{% if add_generation_prompt %}<|assistant|>{% endif %}"
	f, ts, m := newServerN(t, 1, 128, func(s *Server) { s.ChatTemplate = tpl })
	f.readyForTest(t)
	msgs := []map[string]string{{"role": "system", "content": " be brief "}, {"role": "user", "content": "hello"}}
	want := "<|system|>be brief\n<|user|>hello\n<|assistant|>"
	ids := m.Tok.Encode(want, true, true)
	if ids[0] != m.Tok.BOS || ids[1] == m.Tok.BOS {
		t.Fatalf("reference prompt %v", ids)
	}
	checkChat(t, ts.URL, msgs, want, len(ids))
}

func TestChatTemplateErrors(t *testing.T) {
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) {
		s.ChatTemplate = "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be the user') }}{% endif %}" +
			"{% for m in messages %}{{ m.content }}{% endfor %}"
	})
	f.readyForTest(t)
	code, raw := postRaw(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"system","content":"x"}]}`)
	if e := decodeErr(t, raw); code != 400 || !strings.Contains(e.Message, "first message must be the user") {
		t.Errorf("raise_exception: %d %+v", code, e)
	}
	f2, ts2, _ := newServerN(t, 1, 64, func(s *Server) { s.ChatTemplate = "{% for %}" })
	f2.readyForTest(t)
	code, raw = postRaw(t, ts2.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	if e := decodeErr(t, raw); code != 500 || e.Type != "server_error" {
		t.Errorf("bad template: %d %+v", code, e)
	}
	// The rest of the API still works.
	if code := post(t, ts2.URL+"/completion", map[string]any{"prompt": "a", "n_predict": 1}, nil); code != 200 {
		t.Errorf("completion with a bad chat template: %d", code)
	}
}

// /apply-template renders with the model's template, exactly the prompt
// /v1/chat/completions runs; without a template of the model's own it
// refuses rather than fall back to ChatML.
func TestApplyTemplate(t *testing.T) {
	tpl := "{{ bos_token }}{% if messages[0].role == 'assistant' %}{{ raise_exception('the user speaks first') }}{% endif %}" +
		"{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}" +
		"{% if add_generation_prompt %}<|assistant|>{% endif %}"
	f, ts, m := newServerN(t, 1, 128, func(s *Server) { s.ChatTemplate = tpl })
	acq := countAcquires(f.srv)
	f.readyForTest(t)
	msgs := []map[string]string{{"role": "system", "content": " be brief "}, {"role": "user", "content": "hello"}}
	var r struct {
		Prompt *string `json:"prompt"`
	}
	if code := post(t, ts.URL+"/apply-template", map[string]any{"messages": msgs}, &r); code != 200 || r.Prompt == nil {
		t.Fatalf("apply-template: %d %+v", code, r)
	}
	if acq.Load() != 0 {
		t.Errorf("/apply-template took a slot")
	}
	want := "<|system|>be brief\n<|user|>hello\n<|assistant|>"
	if *r.Prompt != want {
		t.Fatalf("prompt %q, want %q", *r.Prompt, want)
	}
	checkChat(t, ts.URL, msgs, *r.Prompt, len(m.Tok.Encode(want, true, true)))
	slots := acq.Load()

	for name, tc := range map[string]struct {
		body string
		code int
		has  string
	}{
		"no messages":     {`{}`, 400, "non-empty"},
		"empty":           {`{"messages":[]}`, 400, "non-empty"},
		"no role":         {`{"messages":[{"content":"hi"}]}`, 400, "no role"},
		"bad content":     {`{"messages":[{"role":"user","content":3}]}`, 400, "content"},
		"not json":        {`{"messages":`, 400, "invalid JSON"},
		"raise_exception": {`{"messages":[{"role":"assistant","content":"x"}]}`, 400, "the user speaks first"},
	} {
		code, raw := postRaw(t, ts.URL+"/apply-template", tc.body)
		if e := decodeErr(t, raw); code != tc.code || e.Code != tc.code || !strings.Contains(e.Message, tc.has) {
			t.Errorf("%s: %d %+v, want %d naming %q", name, code, e, tc.code, tc.has)
		}
	}
	if acq.Load() != slots {
		t.Errorf("a refused /apply-template took a slot")
	}

	f2, ts2, _ := newServerN(t, 1, 64, nil)
	f2.readyForTest(t)
	code, raw := postRaw(t, ts2.URL+"/apply-template", `{"messages":[{"role":"user","content":"x"}]}`)
	if e := decodeErr(t, raw); code != 501 || e.Type != "not_supported_error" {
		t.Errorf("no template: %d %+v", code, e)
	}
	f3, ts3, _ := newServerN(t, 1, 64, func(s *Server) { s.ChatTemplate = "{% for %}" })
	f3.readyForTest(t)
	code, raw = postRaw(t, ts3.URL+"/apply-template", `{"messages":[{"role":"user","content":"x"}]}`)
	if e := decodeErr(t, raw); code != 500 || e.Type != "server_error" {
		t.Errorf("bad template: %d %+v", code, e)
	}
}

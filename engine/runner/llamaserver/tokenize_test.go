package llamaserver

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// Empty content tokenizes to an empty array, not null, and an empty
// array of tokens detokenizes to the empty string.
func TestTokenizeEmpty(t *testing.T) {
	f, ts, _ := newServer(t)
	f.readyForTest(t)
	for _, body := range []string{`{"content":""}`, `{}`, `{"content":"","with_pieces":true}`} {
		code, raw := postRaw(t, ts.URL+"/tokenize", body)
		if code != http.StatusOK || strings.TrimSpace(string(raw)) != `{"tokens":[]}` {
			t.Errorf("/tokenize %s: %d %s, want 200 {\"tokens\":[]}", body, code, raw)
		}
	}
	code, raw := postRaw(t, ts.URL+"/detokenize", `{"tokens":[]}`)
	if code != http.StatusOK || strings.TrimSpace(string(raw)) != `{"content":""}` {
		t.Errorf("/detokenize []: %d %s", code, raw)
	}
}

// A body is one JSON value in UTF-8: trailing data and invalid UTF-8 are
// 400s that say so and where, on every endpoint that decodes a body.
func TestStrictJSONBodies(t *testing.T) {
	f, ts, _ := newServer(t)
	f.readyForTest(t)
	cases := []struct {
		body, want string
	}{
		{`{"content":"hi"} x`, "trailing data after the JSON value at byte 17"},
		{`{"content":"hi"}{"content":"again"}`, "trailing data after the JSON value at byte 16"},
		{`{"content":"hi"}]`, "trailing data after the JSON value at byte 16"},
		{"{\"content\":\"h\xffi\"}", "not valid UTF-8 at byte 13"},
		{"{\"content\":\"\xc3\"}", "not valid UTF-8 at byte 12"},
		{``, "invalid JSON body: empty"},
		{`{"content":`, "invalid JSON body"},
	}
	for _, path := range []string{"/tokenize", "/detokenize", "/completion", "/v1/chat/completions"} {
		for _, c := range cases {
			code, raw := postRaw(t, ts.URL+path, c.body)
			e := decodeErr(t, raw)
			if code != http.StatusBadRequest || !strings.Contains(e.Message, c.want) {
				t.Errorf("%s %q: %d %q, want 400 naming %q", path, c.body, code, e.Message, c.want)
			}
		}
	}
	// Whitespace after the value is fine.
	if code, raw := postRaw(t, ts.URL+"/tokenize", "{\"content\":\"hi\"} \r\n\t"); code != http.StatusOK {
		t.Errorf("trailing whitespace: %d %s", code, raw)
	}
}

// A body near the size cap is tokenized in memory proportional to it:
// the request allocates the body and its decoded string and little more
// (the tokens go out as they are made, never all held), instead of
// hundreds of bytes per input byte, and what it allocated is garbage once
// it is answered.
func TestTokenizeLargeBodyBoundedMemory(t *testing.T) {
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) { s.MaxBodyBytes = 8 << 20 })
	f.readyForTest(t)
	var sb strings.Builder
	for sb.Len() < 6<<20 {
		sb.WriteString("The quick brown fox, 1234 jumps over the lazy dog.\n  Ελληνικά 日本語 🙂 ")
	}
	body, _ := json.Marshal(map[string]any{"content": sb.String()})
	var before, after, released runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, err := http.Post(ts.URL+"/tokenize", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// The client only counts the tokens, so that what it allocates is
	// not counted as the server's.
	head := make([]byte, len(`{"tokens":[`))
	_, err = io.ReadFull(resp.Body, head)
	tokens := 1
	buf := make([]byte, 64<<10)
	for err == nil {
		var n int
		n, err = resp.Body.Read(buf)
		tokens += bytes.Count(buf[:n], []byte(","))
	}
	resp.Body.Close()
	if err != io.EOF || resp.StatusCode != http.StatusOK || string(head) != `{"tokens":[` || tokens < len(body)/8 {
		t.Fatalf("status %d, %q, %d tokens, %v", resp.StatusCode, head, tokens, err)
	}
	runtime.ReadMemStats(&after)
	perByte := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body))
	t.Logf("%d-byte body, %d tokens: %.1f B allocated per body byte", len(body), tokens, perByte)
	if perByte > 6 {
		t.Errorf("%.1f B allocated per body byte, want ≤ 6", perByte)
	}
	runtime.GC()
	runtime.ReadMemStats(&released)
	if live := int64(released.HeapAlloc) - int64(before.HeapAlloc); live > int64(len(body))/2 {
		t.Errorf("%d bytes still live after the answer, for a %d-byte body", live, len(body))
	}
}

package api

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

// decodeResult is what a decode of a serve body did: the answer it wrote
// (status, headers, body) and, when it took the body, the value.
type decodeResult struct {
	ok     bool
	status int
	header http.Header
	body   string
	value  serveBody
}

// reader makes a fresh body for one decode.
type reader func() io.Reader

func decodeWith(t *testing.T, fast bool, body reader, contentLength, limit int64) decodeResult {
	t.Helper()
	rd := body()
	if contentLength >= 0 {
		// The server ends a body at its Content-Length.
		rd = io.LimitReader(rd, contentLength)
	}
	r := httptest.NewRequest("POST", "/v1/serve", rd)
	r.ContentLength = contentLength
	w := httptest.NewRecorder()
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	var b serveBody
	var ok bool
	if fast {
		ok = decodeServeBody(w, r, limit, &b)
	} else {
		ok = decodeBody(w, r, &b)
	}
	return decodeResult{ok: ok, status: w.Code, header: w.Header(), body: w.Body.String(), value: b}
}

// sameDecode checks that decodeServeBody does exactly what decodeBody
// does with the same body.
func sameDecode(t *testing.T, name string, body reader, contentLength, limit int64) {
	t.Helper()
	old := decodeWith(t, false, body, contentLength, limit)
	got := decodeWith(t, true, body, contentLength, limit)
	if !reflect.DeepEqual(old, got) {
		t.Errorf("%s:\n decodeBody       %+v\n decodeServeBody  %+v", name, old, got)
	}
}

func bytesBody(s string) reader { return func() io.Reader { return strings.NewReader(s) } }

// serveBodies are bodies the fast path takes, and variants around them.
var serveBodies = []string{
	`{"prompt":"the quick brown fox 1000","max_tokens":4}`,
	`{}`,
	` { } `,
	"\t{\n\"prompt\" :\r\"x\" , \"max_tokens\": 0 }\n",
	`{"prompt":"","max_tokens":4294967295}`,
	`{"prompt":"héllo wörld ☃ 𝄞","max_tokens":1}`,
	`{"prompt":"p","prompt_tokens":12,"fidelity_floor":255,"joule_ceiling_uj":18446744073709551615,"grant":"AAEC","run":0,"time_first_token":true}`,
	`{"time_first_token":false,"run":18446744073709551615,"fidelity_floor":0}`,
	`{"max_tokens":4,"prompt":"x"}`,
}

func TestParseServeBodyTakesPlainBodies(t *testing.T) {
	// Without this, the comparisons below would hold of a fast path that
	// never takes anything.
	for _, s := range serveBodies {
		var b serveBody
		if !parseServeBody([]byte(s), &b) {
			t.Errorf("the fast path refused %q", s)
		}
	}
	var b serveBody
	if !parseServeBody([]byte(serveBodies[6]), &b) || *b.Prompt != "p" || *b.PromptTokens != 12 || *b.FidelityFloor != 255 ||
		*b.JouleCeilingUJ != 1<<64-1 || *b.Grant != "AAEC" || *b.Run != 0 || !b.TimeFirstToken || b.MaxTokens != nil {
		t.Errorf("decoded %+v", b)
	}
}

func TestDecodeServeBodyMatchesDecodeBody(t *testing.T) {
	cases := append([]string{
		``, ` `, `null`, `[]`, `"x"`, `{`, `}`, `{"prompt"}`, `{"prompt":}`, `{"prompt":"x",}`, `{,}`,
		`{"prompt":"x"}{}`, `{"prompt":"x"} x`, `{"prompt":"x"}]`, `{"prompt":"x"}}`, `{"prompt":"x"} {"prompt":"y"}`,
		`{"prompt":"x","prompt":"y"}`, `{"max_tokens":1,"max_tokens":2}`, `{"prompt":"x","PROMPT":"y"}`, `{"Prompt":"x"}`,
		`{"MAX_TOKENS":3}`, `{"prompt":"x","extra":1}`, `{"prompt":"x","extra":{"a":[1,2,{"b":null}]}}`, `{"meshFields":{}}`,
		`{"prompt":null}`, `{"max_tokens":null}`, `{"time_first_token":null}`, `{"prompt":1}`, `{"prompt":true}`, `{"prompt":["x"]}`,
		`{"max_tokens":-1}`, `{"max_tokens":-0}`, `{"max_tokens":01}`, `{"max_tokens":1.0}`, `{"max_tokens":1e2}`, `{"max_tokens":1E2}`,
		`{"max_tokens":4294967296}`, `{"max_tokens":99999999999999999999999}`, `{"max_tokens":"4"}`, `{"max_tokens":true}`,
		`{"fidelity_floor":256}`, `{"fidelity_floor":-1}`, `{"joule_ceiling_uj":18446744073709551616}`, `{"run":1.5}`,
		`{"time_first_token":1}`, `{"time_first_token":"true"}`, `{"time_first_token":tru}`, `{"time_first_token":truex}`,
		`{"time_first_token":True}`, `{"prompt":"a\"b"}`, `{"prompt":"a\\b"}`, `{"prompt":"\u00e9\n"}`, `{"prompt":"\ud800"}`,
		"{\"prompt\":\"a\tb\"}", "{\"prompt\":\"a\x00b\"}", "{\"prompt\":\"\xff\xfe\"}", "{\"prompt\":\"\xc3\"}", "{\"pr\xffompt\":\"x\"}",
		"\xef\xbb\xbf{\"prompt\":\"x\"}", `{"prompt":"x"`, `{"prompt":"x`, `{"prompt`, `{"max_tokens":4`, `{"max_tokens":`,
		"{\"prompt\":\"x\"}\x00", `{"grant":"not base64!"}`, `{"prompt":"x","max_tokens":4}` + strings.Repeat(" ", 100),
		`{"prompt" : "x" ,"max_tokens" : 4 }`, `{"prompt":"x","max_tokens":4,"run":7}`,
	}, serveBodies...)
	for _, s := range cases {
		sameDecode(t, "body "+quote(s), bytesBody(s), int64(len(s)), 1<<20)
	}
}

// TestDecodeServeBodyMutations compares the two decoders on every
// truncation, every one-byte deletion and many one-byte substitutions of
// the bodies the fast path takes: the malformed and the valid neighbours
// of what it reads.
func TestDecodeServeBodyMutations(t *testing.T) {
	subs := []byte{'"', '\\', '{', '}', '[', ',', ':', ' ', '0', '9', '-', '.', 'e', 'x', 'n', 't', 0, '\n', 0x80, 0xff}
	n := 0
	for _, s := range serveBodies {
		var variants []string
		for i := 0; i <= len(s); i++ {
			variants = append(variants, s[:i])
			if i < len(s) {
				variants = append(variants, s[:i]+s[i+1:])
				for _, c := range subs {
					variants = append(variants, s[:i]+string([]byte{c})+s[i+1:], s[:i]+string([]byte{c})+s[i:])
				}
			}
		}
		for _, v := range variants {
			sameDecode(t, "body "+quote(v), bytesBody(v), int64(len(v)), 1<<20)
			n++
		}
	}
	if n < 1000 {
		t.Fatalf("only %d variants", n)
	}
}

// failingBody yields data, then err.
func failingBody(data string, err error) reader {
	return func() io.Reader { return io.MultiReader(strings.NewReader(data), &errReader{err: err}) }
}

func TestDecodeServeBodyReadsLikeDecodeBody(t *testing.T) {
	const body = `{"prompt":"x","max_tokens":4}`
	timeout := &timeoutErr{}
	cases := []struct {
		name          string
		body          reader
		contentLength int64
		limit         int64
	}{
		{"chunked (no length)", bytesBody(body), -1, 1 << 20},
		{"over the limit", bytesBody(body), int64(len(body)), 10},
		{"length over the limit, body within", bytesBody(body), 1 << 21, 1 << 20},
		{"length at the limit", bytesBody(body), int64(len(body)), int64(len(body))},
		{"cut short", failingBody(body[:10], io.ErrUnexpectedEOF), int64(len(body)), 1 << 20},
		{"cut after the value", failingBody(body, io.ErrUnexpectedEOF), int64(len(body) + 5), 1 << 20},
		{"timeout mid-value", failingBody(body[:10], timeout), int64(len(body)), 1 << 20},
		{"timeout after the value", failingBody(body+" ", timeout), int64(len(body) + 5), 1 << 20},
		{"garbage then timeout", failingBody(body+"x", timeout), int64(len(body) + 5), 1 << 20},
		{"read error", failingBody(`{"pro`, errors.New("connection reset")), int64(len(body)), 1 << 20},
		{"early end", failingBody(body[:5], io.EOF), int64(len(body)), 1 << 20},
	}
	for _, c := range cases {
		sameDecode(t, c.name, c.body, c.contentLength, c.limit)
	}
}

// timeoutErr is a read deadline's error.
type timeoutErr struct{}

func (*timeoutErr) Error() string   { return "i/o timeout" }
func (*timeoutErr) Timeout() bool   { return true }
func (*timeoutErr) Temporary() bool { return true }

func quote(s string) string {
	var b bytes.Buffer
	for _, r := range []byte(s) {
		if r < 0x20 || r >= 0x7f {
			b.WriteString("\\x")
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
			continue
		}
		b.WriteByte(r)
	}
	return b.String()
}

func FuzzDecodeServeBody(f *testing.F) {
	for _, s := range serveBodies {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := string(data)
		sameDecode(t, "body "+quote(s), bytesBody(s), int64(len(s)), 1<<20)
	})
}

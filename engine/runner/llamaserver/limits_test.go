package llamaserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// guard bounds a wait on an event so that a broken server fails the test
// instead of hanging it; it is never the thing asserted.
const guard = 60 * time.Second

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("no %s within %v", what, guard)
		panic("unreachable")
	}
}

// countAcquires makes the server count slot acquisitions.
func countAcquires(s *Server) *atomic.Int32 {
	var n atomic.Int32
	s.hooks.acquired = func(context.Context, int) { n.Add(1) }
	return &n
}

func postRaw(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func decodeErr(t *testing.T, raw []byte) apiError {
	t.Helper()
	var e errBody
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error body %q: %v", raw, err)
	}
	return e.Error
}

func TestEmptyPromptIs400BeforeSlot(t *testing.T) {
	f, ts, _ := newServer(t)
	acq := countAcquires(f.srv)
	f.readyForTest(t)
	for _, body := range []string{`{"prompt":""}`, `{"prompt":[]}`, `{"prompt":null}`, `{}`} {
		code, raw := postRaw(t, ts.URL+"/completion", body)
		e := decodeErr(t, raw)
		if code != 400 || e.Code != 400 || e.Type != "invalid_request_error" || e.Message == "" {
			t.Errorf("%s: %d %+v", body, code, e)
		}
	}
	if n := acq.Load(); n != 0 {
		t.Errorf("a slot was taken %d times for empty prompts", n)
	}
}

// countingReader yields n bytes of a JSON string body on demand and
// counts what was read.
type countingReader struct {
	n, read int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.read >= c.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), c.n-c.read)
	for i := range p[:k] {
		switch pos := c.read + int64(i); {
		case pos < 11:
			p[i] = `{"prompt":"`[pos]
		default:
			p[i] = 'a'
		}
	}
	c.read += k
	return int(k), nil
}

func TestOversizedBodyIs413WithoutReadingIt(t *testing.T) {
	f, _, _ := newServer(t)
	acq := countAcquires(f.srv)
	f.readyForTest(t)
	h := f.srv.Handler()
	const size = 50 << 20
	for _, declared := range []bool{true, false} {
		body := &countingReader{n: size}
		req := httptest.NewRequest("POST", "/completion", body)
		req.ContentLength = -1
		if declared {
			req.ContentLength = size
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		e := decodeErr(t, rec.Body.Bytes())
		if rec.Code != 413 || e.Code != 413 || e.Type != "invalid_request_error" || !strings.Contains(e.Message, "limit") {
			t.Errorf("declared=%v: %d %+v", declared, rec.Code, e)
		}
		// A declared size is refused unread; an undeclared one is read
		// no further than the limit (plus the decoder's last buffer).
		limit := int64(DefaultMaxBodyBytes + 64<<10)
		if declared {
			limit = 0
		}
		if body.read > limit {
			t.Errorf("declared=%v: read %d bytes of a %d-byte body (limit %d)", declared, body.read, int64(size), limit)
		}
	}
	if acq.Load() != 0 {
		t.Error("an oversized body took a slot")
	}
}

func TestPromptOverContextIs400BeforeSlot(t *testing.T) {
	f, ts, m := newServer(t)
	acq := countAcquires(f.srv)
	f.readyForTest(t)
	// Refused by the byte bound, without tokenizing.
	long := strings.Repeat("zq ", 10000)
	code, raw := postRaw(t, ts.URL+"/completion", `{"prompt":"`+long+`"}`)
	e := decodeErr(t, raw)
	if code != 400 || e.Type != "exceed_context_size_error" || e.NCtx != 64 || e.NPromptTokens < 64 ||
		!strings.Contains(e.Message, "at least") {
		t.Errorf("byte bound: %d %+v", code, e)
	}
	// Within the byte bound but over the context once tokenized: the
	// exact count is reported.
	mid := strings.Repeat("zq ", 100)
	want := len(m.Tok.Encode(mid, true, true))
	if lb := (len(mid)+f.srv.maxTokBytes-1)/f.srv.maxTokBytes + 1; lb >= 64 || want < 64 {
		t.Fatalf("test prompt does not exercise the exact check: bound %d, tokens %d", lb, want)
	}
	code, raw = postRaw(t, ts.URL+"/completion", `{"prompt":"`+mid+`"}`)
	e = decodeErr(t, raw)
	if code != 400 || e.Type != "exceed_context_size_error" || e.NPromptTokens != want || e.NCtx != 64 {
		t.Errorf("exact: %d %+v, want %d tokens", code, e, want)
	}
	// A token-array prompt is counted without tokenizing.
	ids := make([]int, 64)
	b, _ := json.Marshal(map[string]any{"prompt": ids})
	code, raw = postRaw(t, ts.URL+"/completion", string(b))
	if e = decodeErr(t, raw); code != 400 || e.Type != "exceed_context_size_error" {
		t.Errorf("token array: %d %+v", code, e)
	}
	if n := acq.Load(); n != 0 {
		t.Errorf("prompts over the context took a slot %d times", n)
	}
}

// The maximum bytes per token bounds every token the tokenizer makes.
func TestMaxTokenBytesBoundsEncode(t *testing.T) {
	f, _, m := newServer(t)
	f.readyForTest(t)
	for _, text := range []string{"hello there", "zq zq zq", "<s>a</s>", "\x00\xff é 漢字", strings.Repeat("the ", 50)} {
		ids := m.Tok.Encode(text, false, true)
		if lb := (len(text) + f.srv.maxTokBytes - 1) / f.srv.maxTokBytes; len(ids) < lb {
			t.Errorf("%q: %d tokens, below the bound %d", text, len(ids), lb)
		}
	}
}

func TestBigPromptDoesNotDelaySmallCompletion(t *testing.T) {
	const big = 50 << 20
	gate := make(chan struct{})
	bigHeld := make(chan struct{})
	var acquires atomic.Int32
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) {
		s.MaxBodyBytes = big + 1<<20
		s.hooks.validate = func(_ context.Context, n int) {
			if n > big/2 {
				close(bigHeld)
				<-gate
			}
		}
		s.hooks.acquired = func(context.Context, int) { acquires.Add(1) }
	})
	f.readyForTest(t)
	bigBody := `{"prompt":"` + strings.Repeat("a", big) + `","n_predict":4}`
	type result struct {
		code int
		raw  []byte
	}
	bigDone := make(chan result, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/completion", "application/json", strings.NewReader(bigBody))
		if err != nil {
			bigDone <- result{code: -1, raw: []byte(err.Error())}
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		bigDone <- result{resp.StatusCode, raw}
	}()
	recv(t, bigHeld, "big prompt in validation")
	// The big request is provably inside validation (held at the gate):
	// a small completion must complete now.
	start := time.Now()
	var small compResp
	if code := post(t, ts.URL+"/completion", map[string]any{"prompt": "hi", "n_predict": 4, "temperature": 0, "ignore_eos": true}, &small); code != 200 || small.TokensPredicted != 4 {
		t.Fatalf("small completion: %d %+v", code, small)
	}
	t.Logf("small completion while a 50 MB prompt is held in validation: %v", time.Since(start))
	select {
	case r := <-bigDone:
		t.Fatalf("the big request finished while held at the gate: %d %s", r.code, r.raw)
	default:
	}
	close(gate)
	r := recv(t, bigDone, "big response")
	if e := decodeErr(t, r.raw); r.code != 400 || e.Type != "exceed_context_size_error" || e.NPromptTokens < 64 {
		t.Fatalf("big: %d %+v", r.code, e)
	}
	if n := acquires.Load(); n != 1 {
		t.Errorf("%d slot acquisitions, want 1 (the small request only)", n)
	}
}

// TestBigPromptMeasured logs the wall-clock figures with nothing gated:
// a small completion sent once the 50 MB request has been read and is
// being validated.
func TestBigPromptMeasured(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB request")
	}
	const big = 50 << 20
	inValidation := make(chan struct{})
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) {
		s.MaxBodyBytes = big + 1<<20
		s.hooks.validate = func(_ context.Context, n int) {
			if n > big/2 {
				close(inValidation)
			}
		}
	})
	f.readyForTest(t)
	bigBody := `{"prompt":"` + strings.Repeat("a", big) + `"}`
	t0 := time.Now()
	bigDone := make(chan time.Duration, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/completion", "application/json", strings.NewReader(bigBody))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		bigDone <- time.Since(t0)
	}()
	recv(t, inValidation, "big prompt in validation")
	start := time.Now()
	if code := post(t, ts.URL+"/completion", map[string]any{"prompt": "hi", "n_predict": 4, "temperature": 0}, nil); code != 200 {
		t.Fatalf("small: %d", code)
	}
	small := time.Since(start)
	bigTotal := recv(t, bigDone, "big response")
	t.Logf("small completion sent during the 50 MB prompt's validation: %v; the 50 MB request in all (upload, decode, refusal): %v", small, bigTotal)
}

// sseEvents parses a whole event stream, checking that it is exactly a
// sequence of "data: <payload>\n\n".
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	rest := body
	for len(rest) > 0 {
		if !bytes.HasPrefix(rest, []byte("data: ")) {
			t.Fatalf("event does not start with 'data: ': %q", rest)
		}
		end := bytes.Index(rest, []byte("\n\n"))
		if end < 0 {
			t.Fatalf("unterminated event: %q", rest)
		}
		payload := rest[len("data: "):end]
		if bytes.Contains(payload, []byte("\n")) {
			t.Fatalf("multi-line payload %q", payload)
		}
		out = append(out, string(payload))
		rest = rest[end+2:]
	}
	return out
}

func TestStreamingEventFormat(t *testing.T) {
	f, ts, m := newServer(t)
	f.readyForTest(t)
	req := map[string]any{"prompt": "hello there", "n_predict": 8, "temperature": 0, "ignore_eos": true, "cache_prompt": false, "return_tokens": true}
	var plain compResp
	if code := post(t, ts.URL+"/completion", req, &plain); code != 200 {
		t.Fatal(code)
	}
	req["stream"] = true
	b, _ := json.Marshal(req)
	resp, err := http.Post(ts.URL+"/completion", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := sseEvents(t, body)
	if len(events) < 2 {
		t.Fatalf("%d events", len(events))
	}
	var text strings.Builder
	var toks []int
	nPrompt := len(m.Tok.Encode("hello there", true, true))
	for i, ev := range events[:len(events)-1] {
		var c struct {
			Content         string `json:"content"`
			Tokens          []int  `json:"tokens"`
			Stop            *bool  `json:"stop"`
			TokensPredicted int    `json:"tokens_predicted"`
			TokensEvaluated int    `json:"tokens_evaluated"`
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if c.Stop == nil || *c.Stop || c.Content == "" || c.TokensEvaluated != nPrompt || c.TokensPredicted != len(toks)+len(c.Tokens) {
			t.Errorf("partial event %d: %s", i, ev)
		}
		text.WriteString(c.Content)
		toks = append(toks, c.Tokens...)
	}
	var last struct {
		compResp
		Stop bool `json:"stop"`
	}
	if err := json.Unmarshal([]byte(events[len(events)-1]), &last); err != nil {
		t.Fatal(err)
	}
	// As llama-server: the final event repeats neither content nor tokens,
	// even with return_tokens, and carries the counts and timings.
	if !last.Stop || last.Content != "" || last.Tokens == nil || len(last.Tokens) != 0 || last.StopType != "limit" || last.TokensPredicted != 8 || last.TokensEvaluated != nPrompt ||
		last.Timings.PredictedN == nil || *last.Timings.PredictedN != 8 || last.Timings.PromptMS == nil {
		t.Errorf("final event: %s", events[len(events)-1])
	}
	if text.String() != plain.Content || len(toks) != 8 || !equalInts(toks, plain.Tokens) {
		t.Errorf("streamed %q %v, plain %q %v", text.String(), toks, plain.Content, plain.Tokens)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestClientDisconnectCancelsGeneration(t *testing.T) {
	started := make(chan struct{})
	type outcome struct {
		err error
		n   int
	}
	done := make(chan outcome, 1)
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) {
		var once sync.Once
		s.hooks.token = func(ctx context.Context, _, n int) {
			once.Do(func() {
				close(started)
				<-ctx.Done() // hold generation until the server sees the client leave
			})
		}
		s.hooks.done = func(_ int, err error, n int) { done <- outcome{err, n} }
	})
	f.readyForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, _ := json.Marshal(map[string]any{"prompt": "hi", "n_predict": 50, "ignore_eos": true, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/completion", bytes.NewReader(b))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	recv(t, started, "first token")
	cancel()
	o := recv(t, done, "generation end")
	if !errors.Is(o.err, context.Canceled) || o.n >= 50 {
		t.Errorf("generation ended with %v after %d tokens; want context.Canceled well before 50", o.err, o.n)
	}
	recv(t, errc, "client return")
	// The slot is free again.
	if code := post(t, ts.URL+"/completion", map[string]any{"prompt": "hi", "n_predict": 2}, nil); code != 200 {
		t.Errorf("after disconnect: %d", code)
	}
}

func TestTwoSlotsServeConcurrently(t *testing.T) {
	in := make(chan int, 2)
	release := make(chan struct{})
	f, ts, _ := newServerN(t, 2, 64, func(s *Server) {
		s.hooks.acquired = func(_ context.Context, id int) {
			in <- id
			<-release
		}
	})
	f.readyForTest(t)
	type res struct {
		code int
		slot int
	}
	out := make(chan res, 2)
	for _, p := range []string{"hello", "there"} {
		go func() {
			var r struct {
				IDSlot int `json:"id_slot"`
			}
			code := post(t, ts.URL+"/completion", map[string]any{"prompt": p, "n_predict": 3}, &r)
			out <- res{code, r.IDSlot}
		}()
	}
	// Both requests hold a slot at once: with one slot the second would
	// wait for the first, which waits for release.
	a, b := recv(t, in, "first slot"), recv(t, in, "second slot")
	if a == b {
		t.Fatalf("both requests on slot %d", a)
	}
	var h struct {
		Status     string `json:"status"`
		Idle       int    `json:"slots_idle"`
		Processing int    `json:"slots_processing"`
	}
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.Status != "ok" || h.Idle != 0 || h.Processing != 2 {
		t.Errorf("health while both run: %+v", h)
	}
	close(release)
	r1, r2 := recv(t, out, "response"), recv(t, out, "response")
	if r1.code != 200 || r2.code != 200 || r1.slot == r2.slot {
		t.Errorf("responses %+v %+v", r1, r2)
	}
	resp, _ = http.Get(ts.URL + "/health")
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h.Idle != 2 || h.Processing != 0 {
		t.Errorf("health after: %+v", h)
	}
}

func TestQueuedRequestLeavesWithItsContext(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	queued := make(chan struct{}, 4)
	f, ts, _ := newServerN(t, 1, 64, func(s *Server) {
		var once sync.Once
		s.hooks.acquired = func(context.Context, int) {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		s.hooks.queued = func() { queued <- struct{}{} }
	})
	f.readyForTest(t)
	first := make(chan int, 1)
	go func() { first <- post(t, ts.URL+"/completion", map[string]any{"prompt": "a", "n_predict": 2}, nil) }()
	recv(t, held, "first request on the slot")
	ctx, cancel := context.WithCancel(context.Background())
	b, _ := json.Marshal(map[string]any{"prompt": "b", "n_predict": 2})
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/completion", bytes.NewReader(b))
	second := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		second <- err
	}()
	recv(t, queued, "second request queued")
	cancel()
	if err := recv(t, second, "queued request's return"); err == nil {
		t.Error("the queued request returned a response after its context ended")
	}
	close(release)
	if code := recv(t, first, "first response"); code != 200 {
		t.Errorf("first: %d", code)
	}
	// The slot was not lost to the request that left the queue.
	if code := post(t, ts.URL+"/completion", map[string]any{"prompt": "c", "n_predict": 2}, nil); code != 200 {
		t.Errorf("third: %d", code)
	}
}

// fakeClock advances a millisecond per reading.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	t := time.Unix(0, 0)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Millisecond)
		return t
	}
}

func TestDeadlineStopsGeneration(t *testing.T) {
	for name, tc := range map[string]struct {
		server time.Duration
		field  any
	}{
		"request field": {0, 5},
		"server flag":   {5 * time.Millisecond, nil},
	} {
		t.Run(name, func(t *testing.T) {
			f, ts, m := newServerN(t, 1, 64, func(s *Server) {
				s.MaxPredict = tc.server
				s.hooks.now = fakeClock()
			})
			f.readyForTest(t)
			req := map[string]any{"prompt": "hi", "n_predict": 40, "temperature": 0, "ignore_eos": true, "return_tokens": true}
			if tc.field != nil {
				req["t_max_predict_ms"] = tc.field
			}
			var r struct {
				compResp
				TimeLimit bool `json:"time_limit_reached"`
			}
			if code := post(t, ts.URL+"/completion", req, &r); code != 200 {
				t.Fatal(code)
			}
			// The clock reads 1 ms at the first token and 1 ms more at each
			// next one: the sixth is the first 5 ms after the first.
			if r.TokensPredicted != 6 || r.StopType != "limit" || !r.TimeLimit || r.Content == "" ||
				r.Content != strings.TrimPrefix(m.Tok.Decode(r.Tokens), " ") && " "+r.Content != m.Tok.Decode(r.Tokens) {
				t.Errorf("got %+v", r)
			}
		})
	}
}

func TestTextTrackerStopWordsAndUTF8(t *testing.T) {
	tr := newTextTracker([]string{"o w"})
	var sent []string
	for _, p := range []string{"he", "llo", " ", "wor", "ld"} {
		d, stop := tr.add([]byte(p))
		sent = append(sent, d)
		if stop {
			break
		}
	}
	// "hello" is sent except its "o" (a possible start of "o w"); " " is
	// held too; "wor" completes the stop word.
	if strings.Join(sent, "|") != "he|ll||" || string(tr.content()) != "hell" || tr.word != "o w" || tr.end() != "" {
		t.Errorf("sent %q, content %q, word %q", sent, tr.content(), tr.word)
	}
	tr = newTextTracker(nil)
	é := []byte("é")
	if d, _ := tr.add([]byte{'a', é[0]}); d != "a" {
		t.Errorf("incomplete rune sent: %q", d)
	}
	if d, _ := tr.add(é[1:]); d != "é" {
		t.Errorf("completed rune: %q", d)
	}
	tr = newTextTracker([]string{"xyz"})
	tr.add([]byte("abx"))
	if rest := tr.end(); rest != "x" || string(tr.content()) != "abx" {
		t.Errorf("held-back tail at the end: %q", rest)
	}
}

func TestEmbeddings(t *testing.T) {
	f, ts, m := newServerN(t, 1, 64, func(s *Server) { s.Embeddings = true })
	f.readyForTest(t)
	get := func() []float32 {
		var out []struct {
			Index     int         `json:"index"`
			Embedding [][]float32 `json:"embedding"`
		}
		if code := post(t, ts.URL+"/embedding", map[string]any{"content": "hello there"}, &out); code != 200 || len(out) != 1 || len(out[0].Embedding) != 1 {
			t.Fatalf("embedding: %d %+v", code, out)
		}
		return out[0].Embedding[0]
	}
	a, b := get(), get()
	if len(a) != m.Dim {
		t.Fatalf("%d values, want %d", len(a), m.Dim)
	}
	var norm float64
	for i := range a {
		norm += float64(a[i]) * float64(a[i])
		if a[i] != b[i] {
			t.Fatalf("not deterministic at %d: %v vs %v", i, a[i], b[i])
		}
	}
	if norm < 1-1e-4 || norm > 1+1e-4 {
		t.Errorf("squared L2 norm %v, want 1", norm)
	}
	var oai struct {
		Object string `json:"object"`
		Data   []struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if code := post(t, ts.URL+"/v1/embeddings", map[string]any{"input": []string{"hello there", "zq"}}, &oai); code != 200 ||
		oai.Object != "list" || len(oai.Data) != 2 || oai.Data[1].Index != 1 || oai.Data[0].Object != "embedding" {
		t.Fatalf("v1: %d %+v", code, oai)
	}
	for i := range a {
		if oai.Data[0].Embedding[i] != a[i] {
			t.Fatalf("/v1/embeddings differs from /embedding at %d", i)
		}
	}
	if want := len(m.Tok.Encode("hello there", true, true)) + len(m.Tok.Encode("zq", true, true)); oai.Usage.PromptTokens != want {
		t.Errorf("usage %d, want %d", oai.Usage.PromptTokens, want)
	}
	if code, raw := postRaw(t, ts.URL+"/embedding", `{"content":""}`); code != 400 {
		t.Errorf("empty input: %d %s", code, raw)
	}
}

func TestEmbeddingsDisabled(t *testing.T) {
	f, ts, _ := newServer(t)
	f.readyForTest(t)
	code, raw := postRaw(t, ts.URL+"/embedding", `{"content":"a"}`)
	if e := decodeErr(t, raw); code != 501 || e.Type != "not_supported_error" {
		t.Errorf("%d %+v", code, e)
	}
}

//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"meshd/engine"
	"meshd/wire"
)

// collect returns Options that stream into pieces, failing with failErr
// on the failAt-th piece (1-based; 0 never).
func collect(pieces *[][]byte, failAt int, failErr error) engine.Options {
	return engine.Options{Emit: func(p []byte) error {
		*pieces = append(*pieces, bytes.Clone(p))
		if len(*pieces) == failAt {
			return failErr
		}
		return nil
	}}
}

// recorded is the request bodies the fake engine saw.
func recorded(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func noResult(t *testing.T, res engine.Result) {
	t.Helper()
	if res.Outcome != (wire.ServeOutcome{}) || res.Output != nil {
		t.Fatalf("failed serve returned a result: %+v", res)
	}
}

// TestServeWithStream: the streamed pieces concatenate to the output, and
// the outcome is the one a plain serve of the same prompt gives, with the
// repeated prompt's cache hits (all but its last token, timings.cache_n
// of the stream's final event).
func TestServeWithStream(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	e := startEngine(t, testConfig(t, "--record", record))
	ctx := serveCtx(t)
	for _, tc := range []struct {
		prompt string
		n      uint32
	}{
		{"hello world", 8},
		{"hello world", 1},
		{"hello there", 3},
		{"a", 2},
		{"the quick brown fox", 40},
	} {
		req, p := request(tc.prompt, tc.n)
		plain, err := e.Serve(ctx, req, p)
		if err != nil {
			t.Fatal(err)
		}
		var pieces [][]byte
		res, err := e.ServeWith(ctx, req, p, collect(&pieces, 0, nil))
		if err != nil {
			t.Fatalf("ServeWith(%q, %d): %v", tc.prompt, tc.n, err)
		}
		if got := bytes.Join(pieces, nil); !bytes.Equal(got, res.Output) {
			t.Fatalf("pieces %q concatenate to %q, output %q", pieces, got, res.Output)
		}
		if len(pieces) != int(tc.n) {
			t.Fatalf("%d pieces for %d tokens", len(pieces), tc.n)
		}
		want := plain.Outcome
		want.CacheHitTokens = want.TokensIn - 1
		if res.Outcome != want || !bytes.Equal(res.Output, plain.Output) {
			t.Fatalf("streamed %+v %q, want %+v %q", res.Outcome, res.Output, want, plain.Output)
		}
	}
	reqs := recorded(t, record)
	if len(reqs) != 10 || reqs[0]["stream"] != nil || reqs[1]["stream"] != true {
		t.Fatalf("requests %v: want plain ones without stream and streamed ones with stream: true", reqs)
	}
}

// TestServeWithWhole: a caller that takes the output whole (Emit set only
// to time the first piece) is answered by one plain /completion: nothing
// is emitted, and the outcome and output are a plain serve's.
func TestServeWithWhole(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	e := startEngine(t, testConfig(t, "--record", record))
	ctx := serveCtx(t)
	req, p := request("hello world", 5)
	plain, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	var pieces [][]byte
	opts := collect(&pieces, 0, nil)
	opts.Whole = true
	res, err := e.ServeWith(ctx, req, p, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != 0 {
		t.Fatalf("emitted %q for a caller that takes the output whole", pieces)
	}
	want := plain.Outcome
	want.CacheHitTokens = want.TokensIn - 1 // the repeated prompt
	if res.Outcome != want || !bytes.Equal(res.Output, plain.Output) || len(res.Output) == 0 {
		t.Fatalf("whole %+v %q, want %+v %q", res.Outcome, res.Output, want, plain.Output)
	}
	if reqs := recorded(t, record); len(reqs) != 2 || reqs[1]["stream"] != nil {
		t.Fatalf("requests %v: want both plain, without stream", reqs)
	}
}

// TestServeWithStreamEOS: a stream that stops at EOS reports the tokens
// it streamed.
func TestServeWithStreamEOS(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t, "--eos-after", "3"))
	req, p := request("abc", 50)
	var pieces [][]byte
	res, err := e.ServeWith(serveCtx(t), req, p, collect(&pieces, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if want := (wire.ServeOutcome{TokensIn: 4, TokensOut: 3, TokensAccepted: 3}); res.Outcome != want || len(pieces) != 3 {
		t.Fatalf("outcome = %+v with %d pieces, want %+v", res.Outcome, len(pieces), want)
	}
}

// TestServeWithStreamClientGone: an Emit error ends the serve with that
// error, and the engine sees its client go away (its request context is
// cancelled while it holds the stream open).
func TestServeWithStreamClientGone(t *testing.T) {
	noLeaks(t)
	cancelled := filepath.Join(t.TempDir(), "cancelled")
	e := startEngine(t, testConfig(t, "--hold-after", "3", "--cancelled", cancelled))
	ctx := serveCtx(t)
	gone := errors.New("client went away")
	req, p := request("stream to nobody", 10)
	var pieces [][]byte
	res, err := e.ServeWith(ctx, req, p, collect(&pieces, 2, gone))
	if !errors.Is(err, gone) {
		t.Fatalf("ServeWith = %v, want the Emit error", err)
	}
	noResult(t, res)
	if len(pieces) != 2 {
		t.Fatalf("%d pieces emitted after the Emit error on the 2nd", len(pieces))
	}
	// The engine is blocked after 3 events until the connection closes:
	// the file appears only once it saw the client go.
	eventually(t, "the engine to see its client go away", func() bool {
		_, err := os.Stat(cancelled)
		return err == nil
	})
	// The slot was released and the engine serves on.
	req, p = request("short", 2)
	var again [][]byte
	if res, err := e.ServeWith(ctx, req, p, collect(&again, 0, nil)); err != nil || len(again) != 2 || res.Outcome.TokensOut != 2 {
		t.Fatalf("serve after an abandoned stream: %+v, %v", res, err)
	}
	// The caller's context ending mid-stream ends the serve the same way.
	os.Remove(cancelled)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, p = request("stream to nobody", 10)
	var cut [][]byte
	res, err = e.ServeWith(cctx, req, p, engine.Options{Emit: func(b []byte) error {
		if cut = append(cut, b); len(cut) == 2 {
			cancel()
		}
		return nil
	}})
	if !errors.Is(err, context.Canceled) || len(cut) != 2 {
		t.Fatalf("cancelled stream: %v after %d pieces", err, len(cut))
	}
	noResult(t, res)
	eventually(t, "the engine to see its client go away", func() bool {
		_, err := os.Stat(cancelled)
		return err == nil
	})
	if e.Restarts() != 0 {
		t.Fatalf("an abandoned stream restarted the engine")
	}
}

// TestServeWithStreamCrash: the engine dying mid-stream fails the serve
// with ErrCrashed after the pieces it did send; the restarted engine
// streams the same answer a plain serve gives.
func TestServeWithStreamCrash(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t, "--crash-on-serve-once", filepath.Join(t.TempDir(), "crashed")))
	ctx := serveCtx(t)
	req, p := request("doomed", 6)
	var pieces [][]byte
	res, err := e.ServeWith(ctx, req, p, collect(&pieces, 0, nil))
	if !errors.Is(err, ErrCrashed) || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("ServeWith = %v, want ErrCrashed with the engine's last output", err)
	}
	noResult(t, res)
	if len(pieces) != 2 {
		t.Fatalf("%d pieces before the crash, want the 2 events the engine sent", len(pieces))
	}
	var again [][]byte
	res, err = e.ServeWith(ctx, req, p, collect(&again, 0, nil))
	if err != nil {
		t.Fatalf("stream after restart: %v", err)
	}
	plain, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	// The restarted engine's cache is cold for the stream; the plain
	// serve repeats its prompt.
	cold := plain.Outcome
	cold.CacheHitTokens = 0
	if !bytes.Equal(bytes.Join(again, nil), plain.Output) || res.Outcome != cold || plain.Outcome.CacheHitTokens != plain.Outcome.TokensIn-1 || e.Restarts() != 1 {
		t.Fatalf("after restart: streamed %q %+v, plain %q %+v, restarts %d", again, res.Outcome, plain.Output, plain.Outcome, e.Restarts())
	}
	if !bytes.HasPrefix(plain.Output, bytes.Join(pieces, nil)) {
		t.Fatalf("pieces before the crash %q are not the start of %q", pieces, plain.Output)
	}
}

// TestServeWithStreamMapsReplies runs one fake engine answering streams
// with whatever the test writes, and checks each is mapped or refused.
func TestServeWithStreamMapsReplies(t *testing.T) {
	noLeaks(t)
	reply := filepath.Join(t.TempDir(), "reply.sse")
	e := startEngine(t, testConfig(t, "--reply", reply))
	const final = `{"content":"","tokens":[],"stop":true,"tokens_predicted":2,"tokens_evaluated":5,"truncated":false,"timings":{"predicted_n":2,"prompt_n":5}}`
	ev := func(s string) string { return "data: " + s + "\n\n" }
	part := func(content string, tokens string, predicted int) string {
		return ev(`{"content":` + strconv.Quote(content) + `,"tokens":` + tokens + `,"stop":false,"tokens_predicted":` + strconv.Itoa(predicted) + `,"tokens_evaluated":5}`)
	}
	ok := part("ab", "[7]", 1) + part("c", "[8]", 2) + ev(final)
	okOutcome := wire.ServeOutcome{TokensIn: 5, TokensOut: 2, TokensAccepted: 2}
	big := strings.Repeat("x", maxEventBase+200)
	tests := []struct {
		name   string
		status int
		ctype  string
		body   string
		pieces []string // emitted, also on failure
		want   *wire.ServeOutcome
		stop   bool   // the result must say a stop word ended it
		bad    bool   // the error must be ErrBadResponse
		errHas string // the error must contain this
	}{
		{name: "ok", body: ok, pieces: []string{"ab", "c"}, want: &okOutcome},
		{name: "comments, crlf, fields and done", body: ": keep-alive\r\n\r\nevent: message\r\nid: 1\r\n" +
			"data: {\"content\":\"ab\",\"tokens\":[7],\"stop\":false,\"tokens_predicted\":1}\r\n\r\n" + part("c", "[8]", 2) + ev(final) + ev("[DONE]"),
			pieces: []string{"ab", "c"}, want: &okOutcome},
		{name: "multi-line data", body: "data: {\"content\":\"abc\",\n" + "data: \"tokens\":[7,8],\"stop\":false}\n\n" + ev(final),
			pieces: []string{"abc"}, want: &okOutcome},
		{name: "counts only from the running tokens_predicted", body: ev(`{"content":"ab","stop":false,"tokens_predicted":1}`) +
			ev(`{"content":"c","stop":false,"tokens_predicted":2}`) + ev(final), pieces: []string{"ab", "c"}, want: &okOutcome},
		{name: "tokens held back in an incomplete character", body: part("", "[]", 1) + part("é", "[9]", 2) + ev(final),
			pieces: []string{"é"}, want: &okOutcome},
		{name: "no token counts at all", body: ev(`{"content":"abc","stop":false}`) + ev(final), pieces: []string{"abc"}, want: &okOutcome},
		{name: "a stop word: only the tokens streamed are claimed", body: part("ab", "[7]", 1) +
			ev(strings.Replace(final, `"stop":true`, `"stop":true,"stop_type":"word"`, 1)),
			pieces: []string{"ab"}, want: &wire.ServeOutcome{TokensIn: 5, TokensOut: 1, TokensAccepted: 1}, stop: true},
		{name: "empty pieces are not emitted", body: part("", "[7]", 1) + part("abc", "[8]", 2) + ev(final), pieces: []string{"abc"}, want: &okOutcome},

		{name: "malformed json", body: part("ab", "[7]", 1) + ev(`{"content":"c",`), pieces: []string{"ab"}, bad: true, errHas: "event 1: malformed JSON"},
		{name: "trailing data", body: ev(`{"content":"c","stop":false} {}`), bad: true, errHas: "trailing data"},
		{name: "no final event", body: part("ab", "[7]", 1), pieces: []string{"ab"}, bad: true, errHas: "ended before its final event"},
		{name: "empty stream", body: "", bad: true, errHas: "ended before its final event"},
		{name: "unterminated event", body: part("ab", "[7]", 1) + strings.TrimSuffix(ev(final), "\n\n"), pieces: []string{"ab"}, bad: true, errHas: "ended inside an event"},
		{name: "unterminated line", body: "data: {", bad: true, errHas: "ended inside an event"},
		{name: "not sse", body: `{"content":"abc","tokens_predicted":3,"tokens_evaluated":1}` + "\n\n", bad: true, errHas: "unexpected line"},
		{name: "json content type", ctype: "application/json", body: ok, bad: true, errHas: "Content-Type"},
		{name: "no stop flag", body: ev(`{"content":"ab"}`), bad: true, errHas: "no stop flag"},
		{name: "no content", body: ev(`{"stop":false,"tokens":[1]}`), bad: true, errHas: "no content"},
		{name: "content not a string", body: ev(`{"content":3,"stop":false}`), bad: true, errHas: "malformed JSON"},
		{name: "token not an integer", body: ev(`{"content":"a","tokens":[1.5],"stop":false}`), bad: true, errHas: "not an integer"},
		{name: "running count decreases", body: part("a", "[7]", 2) + part("b", "[8]", 1), pieces: []string{"a"}, bad: true, errHas: "tokens_predicted 1 after 2"},
		{name: "running count below the tokens listed", body: part("a", "[7,8]", 1), bad: true, errHas: "with 2 tokens listed"},
		{name: "final claims more than streamed", body: part("ab", "[7]", 1) + ev(final), pieces: []string{"ab"}, bad: true, errHas: "tokens_predicted is 2 but 1 tokens were streamed"},
		{name: "final claims fewer than streamed", body: part("ab", "[7]", 1) + part("c", "[8,9]", 3) + ev(final), pieces: []string{"ab", "c"}, bad: true, errHas: "3 tokens were streamed"},
		{name: "final repeats content", body: part("ab", "[7]", 1) + part("c", "[8]", 2) +
			ev(strings.Replace(final, `"content":""`, `"content":"abc"`, 1)), pieces: []string{"ab", "c"}, bad: true, errHas: "repeats 3 bytes"},
		{name: "final without tokens_predicted", body: part("ab", "[7]", 1) + ev(`{"content":"","stop":true,"tokens_evaluated":5}`), pieces: []string{"ab"}, bad: true, errHas: "tokens_predicted is missing"},
		{name: "final truncated", body: part("ab", "[7]", 1) + part("c", "[8]", 2) + ev(strings.Replace(final, `"truncated":false`, `"truncated":true`, 1)),
			pieces: []string{"ab", "c"}, bad: true, errHas: "truncated the prompt"},
		{name: "final beyond n_predict", body: ev(`{"content":"","stop":true,"tokens_predicted":9,"tokens_evaluated":5}`), bad: true, errHas: "exceeds n_predict 8"},
		{name: "event after the final one", body: ok + part("d", "[9]", 3), pieces: []string{"ab", "c"}, bad: true, errHas: "follows the final event"},
		{name: "done before the final event", body: part("ab", "[7]", 1) + ev("[DONE]"), pieces: []string{"ab"}, bad: true, errHas: "event 1: malformed JSON"},
		{name: "event too large", body: ev(`{"content":"` + big + `","stop":false}`), bad: true, errHas: "exceeds"},
		{name: "event too large over lines", body: "data: " + big[:maxEventBase/2] + "\ndata: " + big[:maxEventBase/2] + "\ndata: " + big[:400] + "\n\n", bad: true, errHas: "exceeds"},
		{name: "mixed fields", body: "data: {}\nerror: {}\n\n", bad: true, errHas: "mixes"},
		{name: "error event", body: part("ab", "[7]", 1) + ev(`{"error":{"code":500,"message":"decode failed","type":"server_error"}}`),
			pieces: []string{"ab"}, errHas: "mid-stream: server_error: decode failed"},
		{name: "llama-server error field", body: part("ab", "[7]", 1) + "error: " + `{"code":500,"message":"out of memory","type":"server_error"}` + "\n\n",
			pieces: []string{"ab"}, errHas: "mid-stream: server_error: out of memory"},
		{name: "http error", status: 400, ctype: "application/json",
			body:   `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`,
			errHas: "HTTP 400: exceed_context_size_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status := tc.status
			if status == 0 {
				status = 200
			}
			for path, content := range map[string]string{reply: tc.body, reply + ".status": strconv.Itoa(status)} {
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			os.Remove(reply + ".type")
			if tc.ctype != "" {
				if err := os.WriteFile(reply+".type", []byte(tc.ctype), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			req, p := request("Once upon a time", 8)
			var pieces [][]byte
			res, err := e.ServeWith(serveCtx(t), req, p, collect(&pieces, 0, nil))
			var got []string
			for _, p := range pieces {
				got = append(got, string(p))
			}
			if strings.Join(got, "|") != strings.Join(tc.pieces, "|") {
				t.Fatalf("emitted %q, want %q", got, tc.pieces)
			}
			if tc.want != nil {
				if err != nil {
					t.Fatalf("ServeWith: %v", err)
				}
				if res.Outcome != *tc.want || string(res.Output) != strings.Join(tc.pieces, "") || res.Stopped != tc.stop {
					t.Fatalf("result %+v %q stopped %v, want %+v stopped %v", res.Outcome, res.Output, res.Stopped, *tc.want, tc.stop)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) || errors.Is(err, ErrBadResponse) != tc.bad {
				t.Fatalf("ServeWith = %+v, %v; want an error containing %q (ErrBadResponse: %v)", res.Outcome, err, tc.errHas, tc.bad)
			}
			if errors.Is(err, ErrCrashed) {
				t.Fatalf("a bad stream from a live engine was taken for a crash: %v", err)
			}
			noResult(t, res)
		})
	}
	if e.Restarts() != 0 {
		t.Fatal("bad streams restarted the engine")
	}
}

// fakeTemplate is the fake engine's chat template.
func fakeTemplate(msgs ...string) string {
	var b strings.Builder
	for i := 0; i < len(msgs); i += 2 {
		b.WriteString("<|" + msgs[i] + "|>" + msgs[i+1] + "\n")
	}
	return b.String() + "<|assistant|>"
}

// TestServeWithChat: chat messages are rendered by the engine's
// /apply-template and the rendered prompt is served, plain or streamed, as
// Serve serves any prompt; the receipt's prompt_hash is that of the
// messages.
func TestServeWithChat(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	e := startEngine(t, testConfig(t, "--record", record))
	ctx := serveCtx(t)
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"hello \"there\""}]`
	rendered := fakeTemplate("system", "be brief", "user", `hello "there"`)

	req, p := request(msgs, 5)
	chat, err := e.ServeWith(ctx, req, p, engine.Options{Chat: true})
	if err != nil {
		t.Fatal(err)
	}
	var pieces [][]byte
	streamed, err := e.ServeWith(ctx, req, p, engine.Options{Chat: true, Emit: collect(&pieces, 0, nil).Emit})
	if err != nil {
		t.Fatal(err)
	}
	preq, pp := request(rendered, 5)
	plain, err := e.Serve(ctx, preq, pp)
	if err != nil {
		t.Fatal(err)
	}
	// tokens_in is the engine's count for the rendered prompt (the fake:
	// BOS plus a token per byte).
	// The first chat is cold; the streamed chat and the plain serve of
	// the rendered prompt repeat it, and reuse all but its last token
	// (timings.cache_n) on the chat and the streamed path alike.
	want := wire.ServeOutcome{TokensIn: uint32(1 + len(rendered)), TokensOut: 5, TokensAccepted: 5}
	warm := want
	warm.CacheHitTokens = want.TokensIn - 1
	if chat.Outcome != want || streamed.Outcome != warm || plain.Outcome != warm {
		t.Fatalf("chat %+v, streamed chat %+v, plain %+v; want %+v then %+v twice", chat.Outcome, streamed.Outcome, plain.Outcome, want, warm)
	}
	if !bytes.Equal(chat.Output, plain.Output) || !bytes.Equal(streamed.Output, plain.Output) || !bytes.Equal(bytes.Join(pieces, nil), plain.Output) {
		t.Fatalf("outputs: chat %q, streamed %q (pieces %q), plain %q", chat.Output, streamed.Output, pieces, plain.Output)
	}
	reqs := recorded(t, record)
	if len(reqs) != 3 || reqs[0]["prompt"] != rendered || reqs[1]["prompt"] != rendered || reqs[1]["stream"] != true {
		t.Fatalf("the engine was asked %v, want the rendered prompt %q", reqs, rendered)
	}

	// Refusals: bad messages never reach the engine; messages the
	// template refuses are a bad request too; the messages' hash is what
	// prompt_hash must name.
	for _, tc := range []struct {
		name, prompt string
		hash         *wire.ContentID
		errHas       string
	}{
		{name: "not json", prompt: `hello`, errHas: "not JSON"},
		{name: "empty", prompt: `[]`, errHas: "no messages"},
		{name: "content not a string", prompt: `[{"role":"user","content":1}]`, errHas: "content must be a string"},
		{name: "extra field", prompt: `[{"role":"user","content":"x","tool_calls":[]}]`, errHas: `field "tool_calls"`},
		{name: "refused by the template", prompt: `[{"role":"refuse","content":"x"}]`, errHas: "roles must alternate"},
		{name: "hash of the rendered prompt", prompt: msgs, hash: &preq.PromptHash, errHas: "content id is not prompt_hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, p := request(tc.prompt, 5)
			if tc.hash != nil {
				req.PromptHash = *tc.hash
			}
			emitted := 0
			res, err := e.ServeWith(ctx, req, p, engine.Options{Chat: true, Emit: func([]byte) error { emitted++; return nil }})
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("ServeWith = %v, want ErrBadRequest containing %q", err, tc.errHas)
			}
			noResult(t, res)
			if emitted != 0 {
				t.Fatalf("a refused chat emitted %d pieces", emitted)
			}
		})
	}
	if n := len(recorded(t, record)); n != 3 {
		t.Fatalf("refused chats reached /completion: %d requests", n)
	}
}

// TestServeWithNoChat: an engine that cannot render chat gives ErrNoChat;
// an unreadable rendering is ErrBadResponse.
func TestServeWithNoChat(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		flag   string
		noChat bool
		errHas string
	}{
		{flag: "--no-chat-template", noChat: true, errHas: "HTTP 501: not_supported_error: the model has no chat template"},
		{flag: "--no-apply-template", noChat: true, errHas: "HTTP 404"},
		{flag: "--bad-apply-template", errHas: "malformed JSON"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			e := startEngine(t, testConfig(t, tc.flag))
			ctx := serveCtx(t)
			req, p := request(`[{"role":"user","content":"hi"}]`, 4)
			res, err := e.ServeWith(ctx, req, p, engine.Options{Chat: true})
			if errors.Is(err, engine.ErrNoChat) != tc.noChat || errors.Is(err, ErrBadResponse) == tc.noChat ||
				!strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("ServeWith = %v, want ErrNoChat %v containing %q", err, tc.noChat, tc.errHas)
			}
			noResult(t, res)
			// The same bytes as a plain prompt still serve.
			if _, err := e.Serve(ctx, req, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestServeWithStopPassed: the stop strings reach the child as its
// "stop", streamed or not; a serve without any sends none; a stop list
// the engines refuse never reaches it.
func TestServeWithStopPassed(t *testing.T) {
	noLeaks(t)
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	e := startEngine(t, testConfig(t, "--record", record))
	ctx := serveCtx(t)
	req, p := request("hello world", 4)
	var pieces [][]byte
	streamed := collect(&pieces, 0, nil)
	streamed.Stop = []string{"zz", "y"}
	for _, opts := range []engine.Options{{}, {Stop: []string{"x"}}, streamed} {
		if _, err := e.ServeWith(ctx, req, p, opts); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ServeWith(ctx, req, p, engine.Options{Stop: []string{""}}); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("an empty stop string: %v, want ErrBadRequest", err)
	}
	reqs := recorded(t, record)
	if len(reqs) != 3 {
		t.Fatalf("%d requests recorded, want 3", len(reqs))
	}
	if _, ok := reqs[0]["stop"]; ok {
		t.Fatalf("a serve without stop sent %v", reqs[0]["stop"])
	}
	for i, want := range []string{`["x"]`, `["zz","y"]`} {
		got, _ := json.Marshal(reqs[i+1]["stop"])
		if string(got) != want {
			t.Fatalf("request %d sent stop %s, want %s", i+1, got, want)
		}
	}
}

func TestStoppedByWord(t *testing.T) {
	for body, want := range map[string]bool{
		`{"stop_type":"word","stopping_word":"lo"}`: true,
		`{"stop_type":"limit"}`:                     false,
		`{"stop_type":"eos"}`:                       false,
		`{}`:                                        false,
	} {
		if got := stoppedByWord([]byte(body)); got != want {
			t.Errorf("stoppedByWord(%s) = %v, want %v", body, got, want)
		}
	}
}

//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"meshd/engine"
	"meshd/engine/runner/gguf"
	"meshd/wire"
)

// TestEndToEndMeshGGUF runs the real built-in runner on a synthetic model.
// It is skipped only when the runner's source is not in this tree (a
// checkout without cmd/mesh-gguf); a runner that fails to build fails it.
func TestEndToEndMeshGGUF(t *testing.T) {
	bin := meshGGUF(t)
	noLeaks(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	shape := gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}
	if err := gguf.Synth(f, shape, 7); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	cfg := Config{
		Runner: bin, Model: model, ContextSize: 256, Threads: 1,
		Fidelity: wire.F0, UJPerToken: 50,
		HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
	}
	e := startEngine(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The runner states its context in /props: the max_tokens cap.
	if e.nCtx != 256 || e.TokenCap() != 256 {
		t.Fatalf("context from /props %d, cap %d; want 256", e.nCtx, e.TokenCap())
	}
	if want := "gguf:" + mustCID(t, model); e.Recipe() != want {
		t.Fatalf("recipe = %q, want %q", e.Recipe(), want)
	}

	const prompt, n = "the quick brown fox", 12
	req, p := request(prompt, n)
	promptTokens := tokenize(t, ctx, e.cur.base, prompt)

	first, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	o := first.Outcome
	if o.TokensIn != uint32(len(promptTokens)) || o.CacheHitTokens != 0 || o.TokensOut == 0 ||
		o.TokensAccepted != o.TokensOut || o.SpecProposed != 0 || o.SpecAccepted != 0 {
		t.Fatalf("first serve = %+v; prompt is %d tokens", o, len(promptTokens))
	}

	second, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(second.Output, first.Output) || second.Outcome.TokensOut != o.TokensOut {
		t.Fatalf("greedy decoding differs: %q (%d) then %q (%d)", first.Output, o.TokensOut, second.Output, second.Outcome.TokensOut)
	}
	// The runner reuses the repeated prompt's KV cache for all but the
	// last token, which it evaluates for the logits: those are §5's cache
	// hits (PROFILE §12), and nothing else about the serve changes.
	if want := warm(o); second.Outcome != want {
		t.Fatalf("repeated prompt: %+v, want %+v", second.Outcome, want)
	}

	t.Logf("first %+v %q; second %+v", o, first.Output, second.Outcome)

	// The engine's own account of why it stopped: at the limit it must
	// have produced exactly n tokens, at EOS fewer.
	direct := complete(t, ctx, e.cur.base, prompt, n)
	if direct.TokensPredicted != int(o.TokensOut) {
		t.Fatalf("direct request predicted %d tokens, serve reported %d", direct.TokensPredicted, o.TokensOut)
	}
	if c := direct.Timings.CacheN; c == 0 || c >= int(o.TokensIn) {
		t.Fatalf("repeated prompt: timings.cache_n = %d of %d; the runner did not reuse its prompt cache", c, o.TokensIn)
	}
	switch direct.StopType {
	case "limit":
		if o.TokensOut != n {
			t.Fatalf("stopped at the limit with %d tokens, want %d", o.TokensOut, n)
		}
	case "eos":
		if o.TokensOut >= n {
			t.Fatalf("stopped at EOS with %d tokens of %d", o.TokensOut, n)
		}
	default:
		t.Fatalf("stop_type %q", direct.StopType)
	}

	// Kill the runner with a serve in flight. The runner is stopped first,
	// and the kill waits for the event that the serve's request has been
	// written to the stopped runner's socket: it cannot have been answered,
	// so the serve must fail with ErrCrashed, however the test is scheduled.
	// The serves before it have all returned, so nothing else is in flight.
	pid := e.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop pid %d: %v", pid, err)
	}
	// SIGSTOP takes effect after kill returns, thread by thread: a serve
	// sent before every thread has stopped could still be answered.
	eventually(t, "the runner's threads to stop", func() bool { return threadsStopped(pid) })
	wrote := make(chan struct{}, 1)
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				select {
				case wrote <- struct{}{}:
				default: // a retried write; the first one is the event
				}
			}
		},
	})
	done := make(chan error, 1)
	go func() {
		_, err := e.Serve(traced, req, p)
		done <- err
	}()
	select {
	case <-wrote:
	case err := <-done:
		t.Fatalf("serve ended before its request was written: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill pid %d: %v", pid, err)
	}
	if err := <-done; !errors.Is(err, ErrCrashed) {
		t.Fatalf("serve during the kill: %v, want ErrCrashed", err)
	}
	const kills = 1
	after, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatalf("serve after restart: %v", err)
	}
	if e.PID() == pid || e.Restarts() != kills {
		t.Fatalf("pid %d -> %d, restarts %d after %d kills", pid, e.PID(), e.Restarts(), kills)
	}
	// A fresh process has a cold cache and the same weights.
	if after.Outcome != o || !bytes.Equal(after.Output, first.Output) {
		t.Fatalf("after restart %+v %q, want %+v %q", after.Outcome, after.Output, o, first.Output)
	}
}

// threadsStopped says whether every thread of pid is in the stopped state.
func threadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

func mustCID(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return wire.ContentOf(b).String()
}

func post(t *testing.T, ctx context.Context, url string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func tokenize(t *testing.T, ctx context.Context, base, text string) []int {
	var r struct {
		Tokens []int `json:"tokens"`
	}
	post(t, ctx, base+"/tokenize", map[string]any{"content": text, "add_special": true}, &r)
	if len(r.Tokens) == 0 {
		t.Fatal("tokenize returned no tokens")
	}
	return r.Tokens
}

type directCompletion struct {
	TokensPredicted int    `json:"tokens_predicted"`
	StopType        string `json:"stop_type"`
	Timings         struct {
		CacheN int `json:"cache_n"`
	} `json:"timings"`
}

func complete(t *testing.T, ctx context.Context, base, prompt string, n int) directCompletion {
	var r directCompletion
	post(t, ctx, base+"/completion", map[string]any{"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": true}, &r)
	return r
}

var meshGGUFBuild struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// meshGGUF builds the built-in runner once for the package's tests (next
// to the fake engine, removed by TestMain). It skips the test only when the
// runner's source is not in this tree; a runner that fails to build fails
// it.
// warm is the outcome of serving o's prompt again on the slot that just
// served it: every prompt token but the last comes from the KV cache.
func warm(o wire.ServeOutcome) wire.ServeOutcome {
	o.CacheHitTokens = o.TokensIn - 1
	return o
}

// cold is o without cache hits, to compare serves whose caches differ.
func cold(o wire.ServeOutcome) wire.ServeOutcome {
	o.CacheHitTokens = 0
	return o
}

func meshGGUF(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "cmd", "mesh-gguf")
	if m, _ := filepath.Glob(filepath.Join(src, "*.go")); len(m) == 0 {
		t.Skipf("runner source %s is absent", src)
	}
	b := &meshGGUFBuild
	b.once.Do(func() {
		b.bin = filepath.Join(filepath.Dir(fakeBin), "mesh-gguf")
		b.out, b.err = exec.Command("go", "build", "-o", b.bin, "meshd/cmd/mesh-gguf").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("building mesh-gguf: %v\n%s", b.err, b.out)
	}
	return b.bin
}

// TestEndToEndMeshGGUFStreamAndChat streams and renders chat through the
// real built-in runner: the stream's pieces make the plain answer, a chat
// is rendered by the runner's own template (given on its command line,
// the synthetic model has none) and counted by the runner's tokenizer, and
// a runner whose model has no template refuses chat with ErrNoChat.
func TestEndToEndMeshGGUFStreamAndChat(t *testing.T) {
	bin := meshGGUF(t)
	noLeaks(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	shape := gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}
	if err := gguf.Synth(f, shape, 11); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Runner: bin, Model: model, ContextSize: 256, Threads: 1,
		Fidelity: wire.F0, UJPerToken: 50,
		HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
	}
	const tpl = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
	withTpl := cfg
	withTpl.ExtraArgs = []string{"--chat-template", tpl}
	e := startEngine(t, withTpl)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Streaming: the pieces make the answer a plain serve gives.
	req, p := request("the quick brown fox", 12)
	plain, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	var pieces [][]byte
	streamed, err := e.ServeWith(ctx, req, p, collect(&pieces, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	if streamed.Outcome != warm(plain.Outcome) || !bytes.Equal(streamed.Output, plain.Output) ||
		!bytes.Equal(bytes.Join(pieces, nil), plain.Output) || plain.Outcome.TokensOut == 0 {
		t.Fatalf("streamed %+v %q (pieces %q), plain %+v %q", streamed.Outcome, streamed.Output, pieces, plain.Outcome, plain.Output)
	}
	t.Logf("streamed %d tokens in %d pieces: %q", streamed.Outcome.TokensOut, len(pieces), pieces)

	// Stop: a piece from the middle of the answer ends it where it first
	// occurs, plain and streamed, the runner told through its "stop"; the
	// stop string is never delivered.
	var stop string
	for _, pc := range pieces[len(pieces)/2:] {
		if s := strings.TrimSpace(string(pc)); s != "" && utf8.ValidString(s) {
			stop = s
			break
		}
	}
	if stop == "" {
		t.Fatalf("no piece to stop at in %q", pieces)
	}
	want := plain.Output[:bytes.Index(plain.Output, []byte(stop))]
	for _, stream := range []bool{false, true} {
		var sp [][]byte
		opts := engine.Options{Stop: []string{stop}}
		if stream {
			opts = collect(&sp, 0, nil)
			opts.Stop = []string{stop}
		}
		res, err := e.ServeWith(ctx, req, p, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Output, want) || !res.Stopped || res.Outcome.TokensOut >= plain.Outcome.TokensOut {
			t.Fatalf("stop %q (stream %v): %q stopped %v, %d tokens; want %q stopped, under %d tokens",
				stop, stream, res.Output, res.Stopped, res.Outcome.TokensOut, want, plain.Outcome.TokensOut)
		}
		if stream && !bytes.Equal(bytes.Join(sp, nil), want) {
			t.Fatalf("stop %q: streamed %q, want %q", stop, sp, want)
		}
	}

	// Chat, plain and streamed: rendered by the runner's template, with
	// tokens_in the runner's count of the rendered prompt.
	msgs := `[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]`
	rendered := "<|system|>be brief\n<|user|>hello\n<|assistant|>"
	creq, cp := request(msgs, 8)
	chat, err := e.ServeWith(ctx, creq, cp, engine.Options{Chat: true})
	if err != nil {
		t.Fatal(err)
	}
	var chatPieces [][]byte
	chatStreamed, err := e.ServeWith(ctx, creq, cp, engine.Options{Chat: true, Emit: collect(&chatPieces, 0, nil).Emit})
	if err != nil {
		t.Fatal(err)
	}
	rreq, rp := request(rendered, 8)
	direct, err := e.Serve(ctx, rreq, rp)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tokenize(t, ctx, e.cur.base, rendered)); chat.Outcome.TokensIn != uint32(n) {
		t.Fatalf("chat tokens_in %d, the rendered prompt is %d tokens", chat.Outcome.TokensIn, n)
	}
	// The streamed chat repeats the chat and the rendered prompt repeats
	// both: each reuses all but the last token, whichever path it took.
	if cold(chat.Outcome) != cold(direct.Outcome) || chatStreamed.Outcome != warm(chat.Outcome) || direct.Outcome != warm(chat.Outcome) ||
		!bytes.Equal(chat.Output, direct.Output) ||
		!bytes.Equal(chatStreamed.Output, direct.Output) || !bytes.Equal(bytes.Join(chatPieces, nil), direct.Output) {
		t.Fatalf("chat %+v %q, streamed chat %+v %q, rendered prompt %+v %q",
			chat.Outcome, chat.Output, chatStreamed.Outcome, chatStreamed.Output, direct.Outcome, direct.Output)
	}

	// A client that goes away mid-stream gets its error back, and the
	// runner serves on without a restart.
	gone := errors.New("client went away")
	var few [][]byte
	if _, err := e.ServeWith(ctx, req, p, collect(&few, 1, gone)); !errors.Is(err, gone) || len(few) != 1 {
		t.Fatalf("abandoned stream: %v after %d pieces", err, len(few))
	}
	if again, err := e.Serve(ctx, req, p); err != nil || cold(again.Outcome) != cold(plain.Outcome) || e.Restarts() != 0 {
		t.Fatalf("after an abandoned stream: %+v, %v, restarts %d", again.Outcome, err, e.Restarts())
	}

	// The synthetic model itself carries no chat template.
	bare := startEngine(t, cfg)
	if _, err := bare.ServeWith(ctx, creq, cp, engine.Options{Chat: true}); !errors.Is(err, engine.ErrNoChat) {
		t.Fatalf("chat on a model without a template: %v, want ErrNoChat", err)
	}
}

// TestEndToEndMeshGGUFCacheType runs the real built-in runner with a Q8_0
// KV cache: it starts and serves with the recipe naming the cache, and a
// type it does not implement (f16, which llama-server has) fails the start
// with the runner's own refusal, so the flags do reach it.
func TestEndToEndMeshGGUFCacheType(t *testing.T) {
	bin := meshGGUF(t)
	noLeaks(t)
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	// A q8_0 cache quantises each head in blocks of 32: a head dimension
	// of 32.
	shape := gguf.Shape{Layers: 2, Dim: 128, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}
	if err := gguf.Synth(f, shape, 7); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Runner: bin, Model: model, ContextSize: 256, Threads: 1,
		Fidelity: wire.F0, UJPerToken: 50, CacheTypeK: "q8_0", CacheTypeV: "q8_0",
		HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
	}
	e := startEngine(t, cfg)
	if want := "gguf:" + mustCID(t, model) + "+kv:q8_0/q8_0"; e.Recipe() != want {
		t.Fatalf("recipe = %q, want %q", e.Recipe(), want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, p := request("the quick brown fox", 8)
	res, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.TokensOut == 0 {
		t.Fatalf("serve with a q8_0 cache produced nothing: %+v", res.Outcome)
	}

	cfg.CacheTypeK, cfg.CacheTypeV = "f16", "f16"
	bad, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "f16") {
		t.Fatalf("Start with an f16 cache on mesh-gguf: %v; want the runner's refusal naming f16", err)
	}
	if err := bad.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

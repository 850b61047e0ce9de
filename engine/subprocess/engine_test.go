//go:build unix

package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/engine/recipe"
	"meshd/wire"
)

// TestServeMapsReplies runs one fake engine answering with whatever the
// test writes to its reply file, and checks the mapping of each answer.
func TestServeMapsReplies(t *testing.T) {
	noLeaks(t)
	dir := t.TempDir()
	reply, record := filepath.Join(dir, "reply.json"), filepath.Join(dir, "requests.jsonl")
	cfg := testConfig(t, "--reply", reply, "--record", record)
	cfg.Temperature, cfg.Seed = 0.5, 42
	e := startEngine(t, cfg)

	ok := func(o wire.ServeOutcome) *wire.ServeOutcome { return &o }
	tests := []struct {
		name    string
		status  int
		body    string
		want    *wire.ServeOutcome // nil: an error is expected
		content string
		errHas  string
	}{
		{
			name: "all fields",
			body: `{"content":"abcde","tokens":[5,6,7,8,9],"tokens_predicted":5,"tokens_evaluated":12,
				"tokens_cached":17,"stop":true,"stop_type":"limit","truncated":false,
				"timings":{"cache_n":4,"prompt_n":8,"prompt_ms":1.5,"predicted_n":5,"predicted_ms":9.1,
				"draft_n":7,"draft_n_accepted":3}}`,
			// Drafting reported: accepted is the draft tokens the target
			// kept; the prompt tokens reused from the KV cache (cache_n)
			// are the cache hits.
			want:    ok(wire.ServeOutcome{TokensIn: 12, TokensOut: 5, TokensAccepted: 3, CacheHitTokens: 4, SpecProposed: 7, SpecAccepted: 3}),
			content: "abcde",
		},
		{
			name:    "no timings at all",
			body:    `{"content":"xy","tokens_predicted":2,"tokens_evaluated":3,"tokens_cached":5}`,
			want:    ok(wire.ServeOutcome{TokensIn: 3, TokensOut: 2, TokensAccepted: 2}),
			content: "xy",
		},
		{
			name:    "empty timings",
			body:    `{"content":"xy","tokens_predicted":2,"tokens_evaluated":3,"timings":{}}`,
			want:    ok(wire.ServeOutcome{TokensIn: 3, TokensOut: 2, TokensAccepted: 2}),
			content: "xy",
		},
		{
			name:    "prompt reuse from prompt_n is no cache hit",
			body:    `{"content":"","tokens_predicted":0,"tokens_evaluated":10,"tokens_cached":10,"timings":{"prompt_n":3}}`,
			want:    ok(wire.ServeOutcome{TokensIn: 10}),
			content: "",
		},
		{
			name:    "null timings fields",
			body:    `{"content":"q","tokens_predicted":1,"tokens_evaluated":1,"timings":{"cache_n":null,"draft_n":null}}`,
			want:    ok(wire.ServeOutcome{TokensIn: 1, TokensOut: 1, TokensAccepted: 1}),
			content: "q",
		},
		{
			name:    "empty token list from a build without return_tokens",
			body:    `{"content":"xy","tokens":[],"tokens_predicted":2,"tokens_evaluated":3}`,
			want:    ok(wire.ServeOutcome{TokensIn: 3, TokensOut: 2, TokensAccepted: 2}),
			content: "xy",
		},
		{name: "malformed json", body: `{"content":"x","tokens_predicted":1,`, errHas: "malformed JSON"},
		{name: "not an object", body: `[1,2]`, errHas: "malformed JSON"},
		{name: "trailing garbage", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":1} {}`, errHas: "trailing data"},
		{name: "missing content", body: `{"tokens_predicted":1,"tokens_evaluated":1}`, errHas: "content is missing"},
		{name: "missing tokens_predicted", body: `{"content":"x","tokens_evaluated":1}`, errHas: "tokens_predicted is missing"},
		{name: "missing tokens_evaluated", body: `{"content":"x","tokens_predicted":1}`, errHas: "tokens_evaluated is missing"},
		{name: "negative count", body: `{"content":"x","tokens_predicted":-1,"tokens_evaluated":1}`, errHas: "tokens_predicted = -1"},
		{name: "negative timing", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":1,"timings":{"cache_n":-2}}`, errHas: "cache_n = -2"},
		{name: "count beyond u32", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":4294967296}`, errHas: "out of range"},
		{name: "fractional count", body: `{"content":"x","tokens_predicted":1.5,"tokens_evaluated":1}`, errHas: "want an integer"},
		{name: "count as string", body: `{"content":"x","tokens_predicted":"1","tokens_evaluated":1}`, errHas: "want an integer"},
		{name: "more than n_predict", body: `{"content":"x","tokens_predicted":9,"tokens_evaluated":1}`, errHas: "exceeds n_predict 8"},
		{name: "predicted_n disagrees", body: `{"content":"x","tokens_predicted":2,"tokens_evaluated":1,"timings":{"predicted_n":3}}`, errHas: "predicted_n 3 disagrees"},
		{name: "token list disagrees", body: `{"content":"x","tokens":[1],"tokens_predicted":2,"tokens_evaluated":1}`, errHas: "1 tokens returned"},
		{name: "cache beyond prompt", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":4,"timings":{"cache_n":5}}`, errHas: "cache_n 5 exceeds"},
		{name: "prompt_n beyond prompt", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":4,"timings":{"prompt_n":5}}`, errHas: "prompt_n 5 exceeds"},
		{name: "draft accepted beyond proposed", body: `{"content":"x","tokens_predicted":4,"tokens_evaluated":1,"timings":{"draft_n":2,"draft_n_accepted":3}}`, errHas: "exceeds draft_n"},
		{name: "draft accepted without draft_n", body: `{"content":"x","tokens_predicted":4,"tokens_evaluated":1,"timings":{"draft_n_accepted":1}}`, errHas: "exceeds draft_n 0"},
		{name: "draft accepted beyond delivered", body: `{"content":"x","tokens_predicted":2,"tokens_evaluated":1,"timings":{"draft_n":6,"draft_n_accepted":3}}`, errHas: "exceeds the 2 tokens delivered"},
		{name: "truncated prompt", body: `{"content":"x","tokens_predicted":1,"tokens_evaluated":1,"truncated":true}`, errHas: "truncated the prompt"},
		{name: "engine error", status: 400, body: `{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}`,
			errHas: "HTTP 400: exceed_context_size_error: the request exceeds the available context size"},
		{name: "error without envelope", status: 500, body: `boom`, errHas: `HTTP 500: "boom"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(reply, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			status := tc.status
			if status == 0 {
				status = 200
			}
			if err := os.WriteFile(reply+".status", []byte(strconv.Itoa(status)), 0o644); err != nil {
				t.Fatal(err)
			}
			req, prompt := request("Once upon a time", 8)
			res, err := e.Serve(serveCtx(t), req, prompt)
			if tc.want == nil {
				if err == nil {
					t.Fatalf("Serve = %+v, want an error containing %q", res.Outcome, tc.errHas)
				}
				if !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("error %q does not contain %q", err, tc.errHas)
				}
				if res.Outcome != (wire.ServeOutcome{}) || res.Output != nil {
					t.Fatalf("failed serve returned an outcome: %+v", res)
				}
				return
			}
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if res.Outcome != *tc.want {
				t.Fatalf("outcome = %+v, want %+v", res.Outcome, *tc.want)
			}
			if string(res.Output) != tc.content {
				t.Fatalf("output = %q, want %q", res.Output, tc.content)
			}
		})
	}

	// Every request carried the documented fields.
	raw, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != len(tests) {
		t.Fatalf("engine saw %d requests, want %d", len(lines), len(tests))
	}
	var sent map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &sent); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"prompt": "Once upon a time", "n_predict": 8.0, "cache_prompt": true,
		"temperature": 0.5, "seed": 42.0, "return_tokens": true}
	for k, v := range want {
		if sent[k] != v {
			t.Errorf("request field %s = %v, want %v (request %s)", k, sent[k], v, lines[0])
		}
	}
}

// TestServeCountsAndCache uses the fake's own llama-like accounting: BOS
// plus one token per byte, prefix reuse with the last prompt token always
// re-evaluated, and tokens_cached reporting the whole slot.
func TestServeCountsAndCache(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t))
	ctx := serveCtx(t)
	serve := func(prompt string, n uint32) (wire.ServeOutcome, string) {
		t.Helper()
		req, p := request(prompt, n)
		res, err := e.Serve(ctx, req, p)
		if err != nil {
			t.Fatalf("Serve(%q): %v", prompt, err)
		}
		return res.Outcome, string(res.Output)
	}
	// The fake reuses 11 and then 7 prompt tokens from its KV cache
	// (timings.cache_n): those are the serves' cache hits. The cold serve
	// has none, whatever tokens_cached says the slot holds.
	o1, out1 := serve("hello world", 8)
	if want := (wire.ServeOutcome{TokensIn: 12, TokensOut: 8, TokensAccepted: 8}); o1 != want {
		t.Fatalf("cold serve = %+v, want %+v (tokens_cached must not count as cache hits)", o1, want)
	}
	o2, out2 := serve("hello world", 8)
	if want := (wire.ServeOutcome{TokensIn: 12, TokensOut: 8, TokensAccepted: 8, CacheHitTokens: 11}); o2 != want {
		t.Fatalf("repeated serve = %+v, want %+v (cache_n 11)", o2, want)
	}
	if out1 != out2 || len(out1) != 8 {
		t.Fatalf("outputs %q and %q differ or have the wrong length", out1, out2)
	}
	o3, _ := serve("hello there", 3)
	if want := (wire.ServeOutcome{TokensIn: 12, TokensOut: 3, TokensAccepted: 3, CacheHitTokens: 7}); o3 != want {
		t.Fatalf("shared-prefix serve = %+v, want %+v (cache_n 7)", o3, want)
	}
}

func TestServeStopsAtEOS(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t, "--eos-after", "3"))
	req, p := request("abc", 50)
	res, err := e.Serve(serveCtx(t), req, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (wire.ServeOutcome{TokensIn: 4, TokensOut: 3, TokensAccepted: 3}); res.Outcome != want {
		t.Fatalf("outcome = %+v, want %+v", res.Outcome, want)
	}
}

// TestDraftFlagsFollowTheBuild starts the fake imitating builds with
// different draft-length flags. The fake refuses flags its build does not
// list, so a successful start proves the right spelling was chosen.
func TestDraftFlagsFollowTheBuild(t *testing.T) {
	noLeaks(t)
	for _, tc := range []struct {
		help     string
		wantArgs []string
		startErr string
	}{
		{help: "old", wantArgs: []string{"-np", "1", "-md", "DRAFT", "--draft-max", "4"}},
		{help: "new", wantArgs: []string{"-np", "1", "-md", "DRAFT", "--spec-type", "draft-simple", "--spec-draft-n-max", "4"}},
		{help: "minimal", startErr: "does not list -md"},
	} {
		t.Run(tc.help, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Env = []string{"FAKEENGINE_HELP=" + tc.help}
			cfg.DraftModel = writeModel(t, "draft.gguf", "draft weights")
			cfg.DraftMax = 4
			if tc.startErr != "" {
				e, err := New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				err = e.Start(context.Background())
				if err == nil || !strings.Contains(err.Error(), tc.startErr) {
					t.Fatalf("Start error = %v, want %q", err, tc.startErr)
				}
				if err := e.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			e := startEngine(t, cfg)
			got := strings.Join(e.args, " ")
			want := strings.ReplaceAll(strings.Join(tc.wantArgs, " "), "DRAFT", cfg.DraftModel)
			if !strings.Contains(got, want) {
				t.Fatalf("args %q do not contain %q", got, want)
			}
			// The fake drafts n+n/2 tokens and accepts n-n/4 of them: the
			// accepted drafts, not the tokens delivered, are accepted.
			req, p := request("draft me", 8)
			res, err := e.Serve(serveCtx(t), req, p)
			if err != nil {
				t.Fatal(err)
			}
			if want := (wire.ServeOutcome{TokensIn: 9, TokensOut: 8, TokensAccepted: 6, SpecProposed: 12, SpecAccepted: 6}); res.Outcome != want {
				t.Fatalf("outcome = %+v, want %+v", res.Outcome, want)
			}
			wantRecipe := "gguf:" + wire.ContentOf([]byte("weights of "+t.Name())).String() +
				"+draft:" + wire.ContentOf([]byte("draft weights")).String()
			if e.Recipe() != wantRecipe {
				t.Fatalf("recipe = %q, want %q", e.Recipe(), wantRecipe)
			}
		})
	}
}

// TestCacheTypeReachesChild starts the fake with a KV cache type: the child
// says which types it runs (as it read them from its command line and its
// environment), and the recipe names the same. Without one, the recipe has
// no kv part and the child runs its default even when the daemon's own
// environment carries llama-server's variables, which the child does not
// inherit.
func TestCacheTypeReachesChild(t *testing.T) {
	noLeaks(t)
	t.Setenv("LLAMA_ARG_CACHE_TYPE_K", "q4_0")
	t.Setenv("LLAMA_ARG_CACHE_TYPE_V", "q4_0")
	for _, tc := range []struct {
		name, help, k, v string
		wantLine, kvPart string
		startErr         string
	}{
		{name: "old build", help: "old", k: "q8_0", v: "q8_0", wantLine: "kv cache: k q8_0, v q8_0", kvPart: "+kv:q8_0/q8_0"},
		{name: "new build, mixed", help: "new", k: "q8_0", v: "iq4_nl", wantLine: "kv cache: k q8_0, v iq4_nl", kvPart: "+kv:q8_0/iq4_nl"},
		{name: "default", help: "old", wantLine: "kv cache: k f16, v f16"},
		{name: "unlisted", help: "minimal", k: "q8_0", v: "q8_0", startErr: "does not list --cache-type-k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Env = []string{"FAKEENGINE_HELP=" + tc.help}
			cfg.CacheTypeK, cfg.CacheTypeV = tc.k, tc.v
			lines := make(chan string, 4)
			cfg.Log = slog.New(recordHandler(func(r slog.Record) {
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "line" && strings.HasPrefix(a.Value.String(), "kv cache:") {
						lines <- a.Value.String()
					}
					return true
				})
			}))
			model := "gguf:" + wire.ContentOf([]byte("weights of "+t.Name())).String()
			if tc.startErr != "" {
				e, err := New(context.Background(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := e.Start(context.Background()); err == nil || !strings.Contains(err.Error(), tc.startErr) {
					t.Fatalf("Start error = %v, want %q", err, tc.startErr)
				}
				if err := e.Stop(context.Background()); err != nil {
					t.Fatal(err)
				}
				return
			}
			e := startEngine(t, cfg)
			if want := model + tc.kvPart; e.Recipe() != want {
				t.Fatalf("recipe = %q, want %q", e.Recipe(), want)
			}
			// The child prints the line before it listens; its output is
			// read on its own goroutine, so the line is waited for.
			select {
			case got := <-lines:
				if got != tc.wantLine {
					t.Fatalf("child said %q, want %q", got, tc.wantLine)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the child never said which cache types it runs")
			}
			req, p := request("a cached prompt", 4)
			if _, err := e.Serve(serveCtx(t), req, p); err != nil {
				t.Fatal(err)
			}
		})
	}
}

var crashLine = "GGML_ASSERT: simulated crash in decode"

func TestCrashMidResponseRestarts(t *testing.T) {
	noLeaks(t)
	marker := filepath.Join(t.TempDir(), "crashed")
	e := startEngine(t, testConfig(t, "--crash-on-serve-once", marker))
	ctx := serveCtx(t)
	pid := e.PID()
	req, p := request("crash please", 4)
	res, err := e.Serve(ctx, req, p)
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("Serve = %+v, %v; want ErrCrashed", res, err)
	}
	for _, s := range []string{crashLine, "exit status 3", "pid " + strconv.Itoa(pid)} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("crash error %q does not mention %q", err, s)
		}
	}
	if res.Outcome != (wire.ServeOutcome{}) {
		t.Fatalf("crashed serve claimed %+v", res.Outcome)
	}
	// The next serve waits for the restarted child and succeeds.
	res, err = e.Serve(ctx, req, p)
	if err != nil {
		t.Fatalf("serve after restart: %v", err)
	}
	if res.Outcome.TokensOut != 4 || res.Outcome.TokensIn != 13 {
		t.Fatalf("serve after restart = %+v", res.Outcome)
	}
	if e.Restarts() != 1 || e.PID() == pid || e.PID() == 0 {
		t.Fatalf("restarts = %d, pid %d -> %d", e.Restarts(), pid, e.PID())
	}
	if !errors.Is(e.LastError(), ErrCrashed) {
		t.Fatalf("LastError = %v", e.LastError())
	}
}

// TestKilledMidServeRestarts SIGKILLs the child while it is working on a
// request, and changes the model file meanwhile: the restarted child must
// be named by the new file's recipe.
func TestKilledMidServeRestarts(t *testing.T) {
	noLeaks(t)
	// The first serve hangs until the runner is killed, so the kill lands
	// mid-serve however slowly the test itself is scheduled.
	inFlight := filepath.Join(t.TempDir(), "in-flight")
	cfg := testConfig(t, "--hang-on-serve-once", inFlight)
	e := startEngine(t, cfg)
	oldRecipe := e.Recipe()
	if want := "gguf:" + wire.ContentOf([]byte("weights of "+t.Name())).String(); oldRecipe != want {
		t.Fatalf("recipe = %q, want %q", oldRecipe, want)
	}
	pid := e.PID()
	ctx := serveCtx(t)
	req, p := request("long job", 4)
	type result struct {
		o   wire.ServeOutcome
		err error
	}
	done := make(chan result)
	go func() {
		res, err := e.Serve(ctx, req, p)
		done <- result{res.Outcome, err}
	}()
	eventually(t, "the request to reach the engine", func() bool {
		_, err := os.Stat(inFlight)
		return err == nil
	})
	if err := os.WriteFile(cfg.Model, []byte("retrained weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if !errors.Is(r.err, ErrCrashed) || !strings.Contains(r.err.Error(), "signal: killed") {
		t.Fatalf("Serve = %+v, %v; want ErrCrashed naming the signal", r.o, r.err)
	}
	res, err := e.Serve(ctx, req, p)
	if err != nil {
		t.Fatalf("serve after restart: %v", err)
	}
	if res.Outcome.TokensOut != 4 {
		t.Fatalf("outcome after restart = %+v", res.Outcome)
	}
	if e.PID() == pid || e.Restarts() != 1 {
		t.Fatalf("pid %d -> %d after %d restarts, want one restart", pid, e.PID(), e.Restarts())
	}
	if want := "gguf:" + wire.ContentOf([]byte("retrained weights")).String(); e.Recipe() != want {
		t.Fatalf("recipe after restart = %q, want %q", e.Recipe(), want)
	}
}

var pidRE = regexp.MustCompile(`pid (\d+)`)

func TestNeverHealthyTimesOut(t *testing.T) {
	noLeaks(t)
	cfg := testConfig(t, "--never-healthy", "--say", "llama_model_load: loading tensors 10%")
	// Long enough for a loaded machine to start the fake and get a 503
	// from it, which the error must then quote.
	cfg.HealthTimeout = 2 * time.Second
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.Start(context.Background())
	if !errors.Is(err, ErrStartTimeout) {
		t.Fatalf("Start = %v, want ErrStartTimeout", err)
	}
	for _, s := range []string{"loading tensors 10%", "503 (loading model)", "2s"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	m := pidRE.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error %q names no pid", err)
	}
	pid, _ := strconv.Atoi(m[1])
	if s := procState(pid); s != "" && s != "Z" {
		t.Fatalf("timed-out child %d still running (state %s)", pid, s)
	}
	if _, err := e.Serve(context.Background(), wire.ServeRequest{}, nil); err == nil {
		t.Fatal("Serve on an engine that never started succeeded")
	}
}

func TestStartCancelled(t *testing.T) {
	noLeaks(t)
	e, err := New(context.Background(), testConfig(t, "--never-healthy"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := e.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want DeadlineExceeded", err)
	}
}

func TestExitsImmediately(t *testing.T) {
	noLeaks(t)
	cfg := testConfig(t, "--exit-early", "1", "--say", "llama_model_load: error loading model: tensor 'blk.0.attn_q.weight' has wrong shape")
	e, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = e.Start(context.Background())
	if !errors.Is(err, ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	for _, s := range []string{"has wrong shape", "exit status 1"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestLostPortRaceIsRetried(t *testing.T) {
	noLeaks(t)
	marker := filepath.Join(t.TempDir(), "bind-failed")
	e := startEngine(t, testConfig(t, "--bind-fail-once", marker))
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the first child did not fail to bind: %v", err)
	}
	req, p := request("x", 1)
	if _, err := e.Serve(serveCtx(t), req, p); err != nil {
		t.Fatal(err)
	}
}

func TestStopGraceful(t *testing.T) {
	noLeaks(t)
	e := startEngine(t, testConfig(t))
	in := e.cur
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in.exitStatus() != "exit status 0" || !strings.Contains(in.tail.String(), "received SIGTERM, shutting down") {
		t.Fatalf("child ended with %s; output %s", in.exitStatus(), in.tail)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	req, p := request("x", 1)
	if _, err := e.Serve(context.Background(), req, p); !errors.Is(err, ErrStopped) {
		t.Fatalf("Serve after Stop = %v, want ErrStopped", err)
	}
	if err := e.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

// TestStopEscalatesToKill: the runner ignores SIGTERM and has a child of
// its own that ignores it too; after the grace period the whole process
// group is SIGKILLed.
func TestStopEscalatesToKill(t *testing.T) {
	noLeaks(t)
	cfg := testConfig(t, "--ignore-term", "--spawn-child")
	cfg.StopGrace = 300 * time.Millisecond
	e := startEngine(t, cfg)
	in := e.cur
	m := regexp.MustCompile(`spawned child pid (\d+)`).FindStringSubmatch(in.tail.String())
	if m == nil {
		t.Fatalf("no grandchild pid in %s", in.tail)
	}
	grandchild, _ := strconv.Atoi(m[1])
	if len(groupMembers(in.pid)) != 2 {
		t.Fatalf("process group %d has members %v, want the runner and its child", in.pid, groupMembers(in.pid))
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(in.tail.String(), "received SIGTERM, ignoring") {
		t.Fatalf("SIGTERM was not sent first; output %s", in.tail)
	}
	if in.exitStatus() != "signal: killed" {
		t.Fatalf("runner ended with %q, want signal: killed", in.exitStatus())
	}
	eventually(t, "the process group to be gone", func() bool { return len(groupMembers(in.pid)) == 0 })
	if s := procState(grandchild); s != "" && s != "Z" {
		t.Fatalf("grandchild %d survived (state %s)", grandchild, s)
	}
}

// TestCrashLoopBacksOffAndStops: a child that dies shortly after becoming
// healthy is restarted repeatedly; Stop ends the loop wherever it is.
//
// Each child crashes (exit 4, with a message of its own) on SIGUSR1, which
// the test sends when the engine logs the child healthy: a crash timed by
// a clock in the child would race the engine's health polling on a loaded
// machine and fail the restart instead of crashing a healthy child.
func TestCrashLoopBacksOffAndStops(t *testing.T) {
	noLeaks(t)
	const crashes = 2
	var (
		mu      sync.Mutex
		healthy []int
	)
	third := make(chan int, 1)
	cfg := testConfig(t, "--exit-on-usr1")
	cfg.Log = slog.New(recordHandler(func(r slog.Record) {
		if r.Message != "engine healthy" {
			return
		}
		pid := 0
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "pid" {
				pid = int(a.Value.Int64())
			}
			return true
		})
		mu.Lock()
		defer mu.Unlock()
		healthy = append(healthy, pid)
		if len(healthy) <= crashes {
			// The engine has recorded this child healthy; crash it now.
			if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
				t.Errorf("signal pid %d: %v", pid, err)
			}
			return
		}
		if len(healthy) == crashes+1 {
			third <- pid
		}
	}))
	e := startEngine(t, cfg)
	var last int
	select {
	case last = <-third:
	case <-serveCtx(t).Done():
		t.Fatal("the engine did not restart the crashing child twice")
	}
	// The serve waits for the supervisor to install the third child, so
	// the restart count is final once it returns.
	req, p := request("still up?", 2)
	if _, err := e.Serve(serveCtx(t), req, p); err != nil {
		t.Fatalf("serve after %d crashes: %v", crashes, err)
	}
	if e.Restarts() != crashes || e.PID() != last {
		t.Fatalf("restarts = %d, pid %d; want %d restarts and the third child %d", e.Restarts(), e.PID(), crashes, last)
	}
	if !errors.Is(e.LastError(), ErrCrashed) || !strings.Contains(e.LastError().Error(), "simulated crash on SIGUSR1") ||
		!strings.Contains(e.LastError().Error(), "exit status 4") {
		t.Fatalf("LastError = %v", e.LastError())
	}
	// Crash the third child too and stop at once: Stop must end the loop
	// in its back-off or mid-restart, leaving no runner behind.
	if err := syscall.Kill(last, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := liveChildren(t); len(c) != 0 {
		t.Fatalf("Stop returned with runners %v still alive", c)
	}
}

func TestServeRefusesBadInput(t *testing.T) {
	noLeaks(t)
	e, err := New(context.Background(), testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	req, p := request("fine", 4)
	if _, err := e.Serve(context.Background(), req, p); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("Serve before Start = %v, want ErrNotStarted", err)
	}
	if _, err := e.Serve(context.Background(), req, []byte("other prompt")); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("mismatched prompt = %v, want ErrBadRequest", err)
	}
	bad, bp := request("\xff\xfe not text", 4)
	if _, err := e.Serve(context.Background(), bad, bp); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("invalid UTF-8 = %v", err)
	}
	zero, zp := request("fine", 0)
	if _, err := e.Serve(context.Background(), zero, zp); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("max_tokens 0 = %v", err)
	}
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	model := writeModel(t, "m.gguf", "w")
	good := Config{Runner: fakeBin, Model: model, Fidelity: wire.F1, UJPerToken: 1}
	for name, tc := range map[string]struct {
		mod    func(*Config)
		errHas string
	}{
		"no model":         {func(c *Config) { c.Model = "" }, "model path is empty"},
		"missing model":    {func(c *Config) { c.Model = model + ".nope" }, "no such file"},
		"bad fidelity":     {func(c *Config) { c.Fidelity = 9 }, "fidelity 9"},
		"free engine":      {func(c *Config) { c.UJPerToken = 0 }, "uj_per_token is zero"},
		"draft max alone":  {func(c *Config) { c.DraftMax = 4 }, "no draft model"},
		"draft min alone":  {func(c *Config) { c.DraftMin = 2 }, "no draft model"},
		"draft min > max":  {func(c *Config) { c.DraftModel, c.DraftMax, c.DraftMin = model, 2, 3 }, "draft_min 3 exceeds draft_max 2"},
		"missing draft":    {func(c *Config) { c.DraftModel = model + ".draft" }, "no such file"},
		"negative temp":    {func(c *Config) { c.Temperature = -1 }, "temperature"},
		"backoff inverted": {func(c *Config) { c.RestartBackoff = time.Hour }, "max_restart_backoff"},
		"zero scale":       {func(c *Config) { c.Adapters = []recipe.FileAdapter{{Path: model}} }, "non-zero scale"},
		"bad env":          {func(c *Config) { c.Env = []string{"NOEQUALS"} }, "KEY=value"},
		"kv key alone":     {func(c *Config) { c.CacheTypeK = "q8_0" }, "must be set together"},
		"kv value alone":   {func(c *Config) { c.CacheTypeV = "q8_0" }, "must be set together"},
		"kv unknown type":  {func(c *Config) { c.CacheTypeK, c.CacheTypeV = "q8_0", "q2_k" }, `value type "q2_k"`},
		"kv upper-case":    {func(c *Config) { c.CacheTypeK, c.CacheTypeV = "Q8_0", "q8_0" }, `key type "Q8_0"`},
		"kv in extra args": {func(c *Config) { c.ExtraArgs = []string{"-ngl", "99", "-ctk", "q8_0"} }, `extra args[2] "-ctk" sets the KV cache type`},
		"kv extra with =":  {func(c *Config) { c.ExtraArgs = []string{"--cache-type-v=q4_0"} }, "sets the KV cache type"},
		"kv extra Go flag": {func(c *Config) { c.ExtraArgs = []string{"-cache-type-k", "q8_0"} }, "sets the KV cache type"},
		"kv extra besides": {func(c *Config) { c.CacheTypeK, c.CacheTypeV = "q8_0", "q8_0"; c.ExtraArgs = []string{"--ctv", "f16"} }, "sets the KV cache type"},
		"kv in env":        {func(c *Config) { c.Env = []string{"LLAMA_ARG_CACHE_TYPE_K=q8_0"} }, "sets the KV cache type"},
		"missing runner":   {func(c *Config) { c.Runner = "/nonexistent/mesh-gguf" }, "no such file"},
		"runner not found": {func(c *Config) { c.Runner = "mesh-gguf-that-does-not-exist" }, "nor on PATH"},
		"not executable":   {func(c *Config) { c.Runner = model }, "not an executable"},
	} {
		cfg := good
		tc.mod(&cfg)
		if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: New error = %v, want %q", name, err, tc.errHas)
		}
	}
	if _, err := New(context.Background(), good); err != nil {
		t.Fatalf("good config: %v", err)
	}
}

// liveChildren lists our live child processes running the fake runner.
func liveChildren(t *testing.T) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, en := range ents {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", en.Name(), "exe"))
		b, _ := os.ReadFile(filepath.Join("/proc", en.Name(), "stat"))
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(os.Getpid()) && exe == fakeBin {
			out = append(out, pid)
		}
	}
	return out
}

func TestStopDuringStart(t *testing.T) {
	noLeaks(t)
	e, err := New(context.Background(), testConfig(t, "--never-healthy"))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- e.Start(context.Background()) }()
	eventually(t, "the runner to be spawned", func() bool { return len(liveChildren(t)) == 1 })
	if err := e.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := liveChildren(t); len(c) != 0 {
		t.Fatalf("Stop returned with runner %v still alive", c)
	}
	if err := <-started; err == nil {
		t.Fatal("Start succeeded although Stop interrupted it")
	}
}

// recordHandler is a slog.Handler that hands each record to f, so a test
// can act on a lifecycle event by its message and fields.
type recordHandler func(slog.Record)

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h(r)
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

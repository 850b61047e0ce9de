// Command fakeengine is a stand-in for llama-server used by the subprocess
// package's tests. It speaks the same command line and HTTP API (/health,
// /completion, streamed or not, and /apply-template) and can be told to
// misbehave the ways a real runner does: load slowly or forever, exit at
// once with a message, crash in the middle of a serve (or of a stream) or
// when told to (SIGUSR1), hang in a serve until killed, ignore SIGTERM,
// leave a child behind in its process group, lose the race for its port,
// or have no chat template.
//
// Its --help output imitates a llama-server build; FAKEENGINE_HELP selects
// which one ("old": --draft-max, "new": --spec-type/--spec-draft-n-max,
// "minimal": only -m/--host/--port), and flags the selected build does not
// list are refused as unknown, as a real build would.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const helpOld = `----- common params -----
-h,    --help, --usage                  print usage and exit
-t,    --threads N                      number of CPU threads to use during generation
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of parallel sequences to decode (default: 1)
--no-warmup                             skip warming up the model with an empty run
-m,    --model FNAME                    model path
--lora FNAME                            path to LoRA adapter
--lora-scaled FNAME SCALE               path to LoRA adapter with user defined scaling
-ctk,  --cache-type-k TYPE               KV cache data type for K (default: f16)
-ctv,  --cache-type-v TYPE               KV cache data type for V (default: f16)
----- example-specific params -----
--host HOST                             ip address to listen
--port PORT                             port to listen (default: 8080)
-md,   --model-draft FNAME              draft model for speculative decoding (default: unused)
--draft-max, --draft, --draft-n N       number of tokens to draft for speculative decoding (default: 16)
`

const helpNew = `----- common params -----
-h,    --help, --usage                  print usage and exit
-t,    --threads N                      number of CPU threads to use during generation
-c,    --ctx-size N                     size of the prompt context
-np,   --parallel N                     number of server slots (default: -1, -1 = auto)
--no-warmup                             skip warming up the model with an empty run
-m,    --model FNAME                    model path
-ctk,  --cache-type-k TYPE               KV cache data type for K (default: f16)
-ctv,  --cache-type-v TYPE               KV cache data type for V (default: f16)
--host HOST                             ip address to listen
--port PORT                             port to listen (default: 8080)
-md,   --model-draft FNAME              draft model for speculative decoding (default: unused)
--spec-type [none|draft-simple|ngram-mod]   type of speculative decoding (default: none)
--spec-draft-n-max N                    number of tokens to draft (default: 16)
`

const helpMinimal = `usage: runner -m FNAME --host HOST --port PORT
`

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

type config struct {
	model, host, draft, specType string
	port, ctx, threads, np       int
	draftMax, specDraftNMax      int
	cacheK, cacheV               string
	noWarmup                     bool
	loras                        multi

	loadDelay, serveDelay             time.Duration
	neverHealthy, ignoreTerm          bool
	spawnChild, exitOnUSR1            bool
	exitEarly                         int
	say                               multi
	crashOnce, bindFailOnce, hangOnce string
	reply, record                     string
	eosAfter                          int
	holdAfter                         int
	cancelled                         string
	noChatTemplate, noApplyTemplate   bool
	badApplyTemplate                  bool
}

func main() {
	for _, a := range os.Args[1:] {
		if a == "-sleeper" {
			sleeper()
		}
		if a == "--help" || a == "-h" {
			switch os.Getenv("FAKEENGINE_HELP") {
			case "new":
				fmt.Print(helpNew)
			case "minimal":
				fmt.Print(helpMinimal)
			default:
				fmt.Print(helpOld)
			}
			os.Exit(0)
		}
	}
	if err := checkBuildFlags(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	var c config
	fs := flag.NewFlagSet("fakeengine", flag.ContinueOnError)
	fs.StringVar(&c.model, "m", "", "")
	fs.StringVar(&c.host, "host", "127.0.0.1", "")
	fs.IntVar(&c.port, "port", 8080, "")
	fs.IntVar(&c.ctx, "c", 0, "")
	fs.IntVar(&c.threads, "t", 0, "")
	fs.IntVar(&c.np, "np", 0, "")
	fs.BoolVar(&c.noWarmup, "no-warmup", false, "")
	fs.StringVar(&c.draft, "md", "", "")
	fs.IntVar(&c.draftMax, "draft-max", 0, "")
	fs.IntVar(&c.specDraftNMax, "spec-draft-n-max", 0, "")
	fs.StringVar(&c.specType, "spec-type", "", "")
	fs.Var(&c.loras, "lora", "")
	for _, n := range []string{"ctk", "cache-type-k"} {
		fs.StringVar(&c.cacheK, n, "f16", "")
	}
	for _, n := range []string{"ctv", "cache-type-v"} {
		fs.StringVar(&c.cacheV, n, "f16", "")
	}
	fs.DurationVar(&c.loadDelay, "load-delay", 0, "answer /health 503 for this long")
	fs.BoolVar(&c.neverHealthy, "never-healthy", false, "answer /health 503 forever")
	fs.IntVar(&c.exitEarly, "exit-early", -1, "print -say lines and exit with this code before binding")
	fs.Var(&c.say, "say", "a line to print on stderr at start")
	fs.BoolVar(&c.ignoreTerm, "ignore-term", false, "log SIGTERM and carry on")
	fs.BoolVar(&c.spawnChild, "spawn-child", false, "leave a SIGTERM-ignoring child in the process group")
	fs.StringVar(&c.crashOnce, "crash-on-serve-once", "", "crash mid-response on a serve unless this file exists (then create it)")
	fs.StringVar(&c.bindFailOnce, "bind-fail-once", "", "fail to bind unless this file exists (then create it)")
	fs.DurationVar(&c.serveDelay, "serve-delay", 0, "sleep before answering /completion")
	fs.BoolVar(&c.exitOnUSR1, "exit-on-usr1", false, "exit with code 4 on SIGUSR1, as a runner crashing on its own")
	fs.StringVar(&c.hangOnce, "hang-on-serve-once", "", "hang in a serve until killed unless this file exists (then create it)")
	fs.StringVar(&c.reply, "reply", "", "answer /completion with this file's bytes (status from FILE.status)")
	fs.StringVar(&c.record, "record", "", "append each /completion request body to this file")
	fs.IntVar(&c.eosAfter, "eos-after", 0, "stop with eos after this many tokens")
	fs.IntVar(&c.holdAfter, "hold-after", 0, "in a stream, after this many events wait for the client to go away")
	fs.StringVar(&c.cancelled, "cancelled", "", "create this file when a held stream's client has gone away")
	fs.BoolVar(&c.noChatTemplate, "no-chat-template", false, "answer /apply-template 501, as mesh-gguf on a model without a template")
	fs.BoolVar(&c.noApplyTemplate, "no-apply-template", false, "have no /apply-template (404), as an older llama-server")
	fs.BoolVar(&c.badApplyTemplate, "bad-apply-template", false, "answer /apply-template with a prompt that is not a string")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(1)
	}
	if c.model == "" {
		fmt.Fprintln(os.Stderr, "error: -m is required")
		os.Exit(1)
	}
	for _, l := range c.say {
		fmt.Fprintln(os.Stderr, l)
	}
	// As llama-server: an unknown cache type fails the start, and the
	// environment supplies what the command line does not.
	for _, kv := range []struct {
		v   *string
		env string
	}{{&c.cacheK, "LLAMA_ARG_CACHE_TYPE_K"}, {&c.cacheV, "LLAMA_ARG_CACHE_TYPE_V"}} {
		if e := os.Getenv(kv.env); e != "" && !flagSet(fs, kv.env) {
			*kv.v = e
		}
		switch *kv.v {
		case "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1":
		default:
			fmt.Fprintf(os.Stderr, "error: Unsupported cache type: %s\n", *kv.v)
			os.Exit(1)
		}
	}
	fmt.Fprintf(os.Stderr, "kv cache: k %s, v %s\n", c.cacheK, c.cacheV)
	if c.exitEarly >= 0 {
		os.Exit(c.exitEarly)
	}
	if c.spawnChild {
		self, _ := os.Executable()
		ch := exec.Command(self, "-sleeper")
		ch.Stdout, ch.Stderr = os.Stdout, os.Stderr
		if err := ch.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "spawn:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "spawned child pid %d\n", ch.Process.Pid)
	}
	if c.bindFailOnce != "" && createOnce(c.bindFailOnce) {
		fmt.Fprintf(os.Stderr, "couldn't bind HTTP server socket, hostname: %s, port: %d\n", c.host, c.port)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "couldn't bind HTTP server socket, hostname: %s, port: %d: %v\n", c.host, c.port, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "main: HTTP server is listening, hostname: %s, port: %d\n", c.host, c.port)

	// Tests crash the runner on a signal rather than after a delay, so that
	// the crash cannot race the agent's health polling: they send it only
	// once the agent has seen the runner healthy.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	if c.exitOnUSR1 {
		signal.Notify(sigs, syscall.SIGUSR1)
	}
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGUSR1 {
				fmt.Fprintln(os.Stderr, "fatal: simulated crash on SIGUSR1")
				os.Exit(4)
			}
			if c.ignoreTerm {
				fmt.Fprintln(os.Stderr, "received SIGTERM, ignoring")
				continue
			}
			fmt.Fprintln(os.Stderr, "received SIGTERM, shutting down")
			os.Exit(0)
		}
	}()

	s := &server{c: c, start: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("POST /completion", s.completion)
	if c.ctx > 0 {
		// As llama-server states its slots' context.
		mux.HandleFunc("GET /props", func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `{"default_generation_settings":{"n_ctx":%d},"total_slots":1}`, c.ctx)
		})
	}
	if !c.noApplyTemplate {
		mux.HandleFunc("POST /apply-template", s.applyTemplate)
	}
	fmt.Fprintln(os.Stderr, "srv load_model: loading model", c.model)
	err = http.Serve(ln, mux)
	fmt.Fprintln(os.Stderr, "serve:", err)
	os.Exit(1)
}

// checkBuildFlags refuses the build-specific flags the imitated build does
// not list, as llama-server does with "invalid argument".
func checkBuildFlags(args []string) error {
	var refused []string
	switch os.Getenv("FAKEENGINE_HELP") {
	case "new":
		refused = []string{"draft-max", "lora"}
	case "minimal":
		refused = []string{"c", "t", "np", "no-warmup", "md", "draft-max", "spec-draft-n-max", "spec-type", "lora",
			"ctk", "cache-type-k", "ctv", "cache-type-v"}
	default:
		refused = []string{"spec-draft-n-max", "spec-type"}
	}
	for _, a := range args {
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if !strings.HasPrefix(a, "-") {
			continue
		}
		for _, r := range refused {
			if name == r {
				return fmt.Errorf("invalid argument: %s", a)
			}
		}
	}
	return nil
}

// flagSet reports whether the command line set the cache type that env
// stands for, by either spelling.
func flagSet(fs *flag.FlagSet, env string) bool {
	names := map[string]bool{"ctk": true, "cache-type-k": true}
	if env == "LLAMA_ARG_CACHE_TYPE_V" {
		names = map[string]bool{"ctv": true, "cache-type-v": true}
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || names[f.Name] })
	return set
}

func createOnce(path string) bool {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func sleeper() {
	signal.Ignore(syscall.SIGTERM)
	for {
		time.Sleep(time.Hour)
	}
}

type server struct {
	c     config
	start time.Time

	mu   sync.Mutex
	prev []int // the previous prompt's tokens, for the prompt cache
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.c.neverHealthy || time.Since(s.start) < s.c.loadDelay {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`)
		return
	}
	io.WriteString(w, `{"status":"ok"}`)
}

type completionRequest struct {
	Stream       bool     `json:"stream"`
	Prompt       *string  `json:"prompt"`
	NPredict     *int     `json:"n_predict"`
	CachePrompt  *bool    `json:"cache_prompt"`
	Temperature  *float64 `json:"temperature"`
	Seed         *int64   `json:"seed"`
	ReturnTokens bool     `json:"return_tokens"`
}

func (s *server) completion(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.c.record != "" {
		f, err := os.OpenFile(s.c.record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			f.Write(append(body, '\n'))
			f.Close()
		}
	}
	if s.c.serveDelay > 0 {
		time.Sleep(s.c.serveDelay)
	}
	if s.c.hangOnce != "" && createOnce(s.c.hangOnce) {
		// In flight for good: the test kills the runner now, knowing from
		// the file that the request has reached it.
		select {}
	}
	var req completionRequest
	jsonErr := json.Unmarshal(body, &req)
	if s.c.crashOnce != "" && createOnce(s.c.crashOnce) {
		if req.Stream && req.Prompt != nil {
			// Two events, then the process dies mid-stream.
			g := s.generate(req)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for i := 0; i < 2 && i < len(g.gen); i++ {
				writeEvent(w, g.partial(i))
			}
			fmt.Fprintln(os.Stderr, "GGML_ASSERT: simulated crash in decode")
			os.Exit(3)
		}
		// Half a response, then the process dies: the client sees the
		// connection end in the middle of the body.
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "4096")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"content":"partial`)
		w.(http.Flusher).Flush()
		fmt.Fprintln(os.Stderr, "GGML_ASSERT: simulated crash in decode")
		os.Exit(3)
	}
	if s.c.reply != "" {
		b, err := os.ReadFile(s.c.reply)
		if err == nil {
			status := http.StatusOK
			if sb, err := os.ReadFile(s.c.reply + ".status"); err == nil {
				status, _ = strconv.Atoi(strings.TrimSpace(string(sb)))
			}
			ct := "application/json"
			if req.Stream {
				ct = "text/event-stream"
			}
			if tb, err := os.ReadFile(s.c.reply + ".type"); err == nil {
				ct = strings.TrimSpace(string(tb))
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(status)
			w.Write(b)
			return
		}
	}
	if jsonErr != nil || req.Prompt == nil {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"code":400,"message":"\"prompt\" must be provided","type":"invalid_request_error"}}`)
		return
	}
	g := s.generate(req)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(g.final(false)); err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "write:", err)
		}
		return
	}
	// As llama-server: one event per token, then the final event without
	// the content and tokens already sent.
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i := range g.gen {
		if s.c.holdAfter > 0 && i == s.c.holdAfter {
			select {
			case <-r.Context().Done():
				// The client went away: the connection is closed.
				if s.c.cancelled != "" {
					os.WriteFile(s.c.cancelled, nil, 0o644)
				}
				return
			case <-time.After(time.Minute):
			}
		}
		if err := writeEvent(w, g.partial(i)); err != nil {
			return
		}
	}
	writeEvent(w, g.final(true))
}

func writeEvent(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return err
	}
	w.(http.Flusher).Flush()
	return nil
}

// applyTemplate renders messages as "<|role|>content\n" each, then
// "<|assistant|>"; a message with the role "refuse" is refused as a
// template's raise_exception would.
func (s *server) applyTemplate(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if s.c.noChatTemplate {
		w.WriteHeader(http.StatusNotImplemented)
		io.WriteString(w, `{"error":{"code":501,"message":"the model has no chat template","type":"not_supported_error"}}`)
		return
	}
	if s.c.badApplyTemplate {
		io.WriteString(w, `{"prompt":3}`)
		return
	}
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"code":400,"message":"\"messages\" must be a non-empty array","type":"invalid_request_error"}}`)
		return
	}
	var b strings.Builder
	for _, m := range req.Messages {
		if m.Role == "refuse" {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":400,"message":"Conversation roles must alternate","type":"invalid_request_error"}}`)
			return
		}
		fmt.Fprintf(&b, "<|%s|>%s\n", m.Role, m.Content)
	}
	b.WriteString("<|assistant|>")
	json.NewEncoder(w).Encode(map[string]string{"prompt": b.String()})
}

// generation is one completion's result.
type generation struct {
	model, prompt string
	promptTokens  int
	cached        int
	gen           []int
	content       []byte
	stopType      string
	timings       map[string]any
	returnTokens  bool
}

// generate imitates llama-server's accounting: a string prompt gets a BOS
// token, the prompt cache reuses the common prefix with the previous prompt
// but always re-evaluates at least the last prompt token, and tokens_cached
// is everything in the slot afterwards (prompt plus generated).
func (s *server) generate(req completionRequest) generation {
	prompt := append([]int{1}, bytesToTokens(*req.Prompt)...)
	cached := 0
	if req.CachePrompt == nil || *req.CachePrompt {
		for cached < len(s.prev) && cached < len(prompt) && s.prev[cached] == prompt[cached] {
			cached++
		}
		cached = min(cached, len(prompt)-1)
	}
	s.prev = prompt
	n := 16
	if req.NPredict != nil && *req.NPredict >= 0 {
		n = *req.NPredict
	}
	h := fnv.New32a()
	h.Write([]byte(*req.Prompt))
	if req.Temperature != nil && *req.Temperature > 0 && req.Seed != nil {
		fmt.Fprint(h, *req.Seed)
	}
	seed := int(h.Sum32())
	g := generation{model: s.c.model, prompt: *req.Prompt, promptTokens: len(prompt), cached: cached,
		stopType: "limit", returnTokens: req.ReturnTokens}
	for i := 0; i < n; i++ {
		if s.c.eosAfter > 0 && i == s.c.eosAfter {
			g.stopType = "eos"
			break
		}
		t := 3 + (seed+i*31)%250
		if t < 0 {
			t = -t
		}
		g.gen = append(g.gen, t)
		g.content = append(g.content, byte('a'+t%26))
	}
	s.prev = append(s.prev, g.gen...)
	g.timings = map[string]any{
		"cache_n":      cached,
		"prompt_n":     len(prompt) - cached,
		"prompt_ms":    1.5,
		"predicted_n":  len(g.gen),
		"predicted_ms": 3.25,
	}
	if s.c.draft != "" && len(g.gen) > 0 {
		g.timings["draft_n"] = len(g.gen) + len(g.gen)/2
		g.timings["draft_n_accepted"] = len(g.gen) - len(g.gen)/4
	}
	return g
}

// partial is the stream event of token i.
func (g generation) partial(i int) map[string]any {
	return map[string]any{
		"index":            0,
		"content":          string(g.content[i : i+1]),
		"tokens":           []int{g.gen[i]},
		"stop":             false,
		"id_slot":          0,
		"tokens_predicted": i + 1,
		"tokens_evaluated": g.promptTokens,
	}
}

// final is the non-streamed response, or the final event of a stream.
func (g generation) final(stream bool) map[string]any {
	resp := map[string]any{
		"index":            0,
		"content":          string(g.content),
		"id_slot":          0,
		"stop":             true,
		"model":            g.model,
		"tokens_predicted": len(g.gen),
		"tokens_evaluated": g.promptTokens,
		"prompt":           g.prompt,
		"has_new_line":     false,
		"truncated":        false,
		"stop_type":        g.stopType,
		"stopping_word":    "",
		"tokens_cached":    g.promptTokens + len(g.gen),
		"timings":          g.timings,
	}
	if g.returnTokens {
		resp["tokens"] = g.gen
		if g.gen == nil {
			resp["tokens"] = []int{}
		}
	}
	if stream {
		resp["content"], resp["tokens"] = "", []int{}
	}
	return resp
}

func bytesToTokens(s string) []int {
	t := make([]int, len(s))
	for i := range len(s) {
		t[i] = 3 + int(s[i])
	}
	return t
}

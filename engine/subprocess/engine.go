//go:build unix

package subprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"meshd/engine"
	"meshd/engine/recipe"
	"meshd/wire"
)

// Sentinel errors; match them with errors.Is.
var (
	// ErrCrashed is wrapped when the child dies during a serve or while
	// it is being supervised.
	ErrCrashed = errors.New("engine process crashed")
	// ErrNotStarted is returned by Serve before Start has succeeded.
	ErrNotStarted = errors.New("engine not started")
	// ErrStopped is returned once Stop has been called.
	ErrStopped = errors.New("engine stopped")
)

const (
	// bindAttempts bounds the retries when the child loses its port.
	bindAttempts = 3
	// maxResponse bounds a /completion body read into memory.
	maxResponse = 64 << 20
)

type lifecycle int

const (
	idle lifecycle = iota
	starting
	running
	stopped
)

// Engine is the local GGUF engine run as a supervised child process. It
// implements engine.Backend. Create it with New, then Start it; Stop it to
// end the child and the supervisor.
type Engine struct {
	cfg       Config
	runner    string
	files     recipe.Files
	transport *http.Transport
	client    *http.Client
	hop       *hopClient    // a serve's exchanges with the child
	slot      chan struct{} // one serve at a time
	stopped   chan struct{} // closed by Stop
	supDone   chan struct{} // closed when the supervisor returns
	starts    sync.WaitGroup

	mu       sync.Mutex
	state    lifecycle
	args     []string
	cur      *instance     // the healthy child; nil while down
	up       chan struct{} // closed when cur is next set
	lastErr  error
	recipe   string
	nCtx     int // the last healthy child's context (TokenCap)
	restarts int
	life     context.Context
	cancel   context.CancelFunc
}

var (
	_ engine.Slotted       = (*Engine)(nil)
	_ engine.OptionBackend = (*Engine)(nil)
	_ engine.TokenCapped   = (*Engine)(nil)
)

// TokenCap implements engine.TokenCapped: the context the child runs
// with (as its /props states it, else the configured context size), lowered
// to Config.MaxTokens when that is set, and never over
// engine.MaxEngineTokens. A serve cannot generate more tokens than fit
// its context, so a larger max_tokens asks for work that cannot be done.
func (e *Engine) TokenCap() uint32 {
	e.mu.Lock()
	n := e.nCtx
	e.mu.Unlock()
	if n <= 0 {
		n = e.cfg.ContextSize
	}
	c := uint32(engine.MaxEngineTokens)
	if n > 0 && n < engine.MaxEngineTokens {
		c = uint32(n)
	}
	if m := e.cfg.MaxTokens; m > 0 && m < c {
		c = m
	}
	return c
}

// New checks cfg, locates the runner and computes the recipe (hashing the
// model files unless cfg.Recipes already knows them). It starts nothing.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	runner, err := locateRunner(cfg.Runner)
	if err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	files := recipe.Files{Model: cfg.Model, Draft: cfg.DraftModel, KV: recipe.KVCache{K: cfg.CacheTypeK, V: cfg.CacheTypeV}, Adapters: cfg.Adapters}
	r, err := cfg.Recipes.Recipe(ctx, files)
	if err != nil {
		return nil, fmt.Errorf("engine config: %w", err)
	}
	// No compression: the child is on loopback, and a gzip answer would
	// only cost both sides the work.
	tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, DisableCompression: true}
	life, cancel := context.WithCancel(context.Background())
	return &Engine{
		cfg:       cfg,
		runner:    runner,
		files:     files,
		transport: tr,
		client:    &http.Client{Transport: tr},
		hop:       newHopClient(2, time.Minute),
		slot:      make(chan struct{}, 1),
		stopped:   make(chan struct{}),
		supDone:   make(chan struct{}),
		up:        make(chan struct{}),
		recipe:    r.String(),
		life:      life,
		cancel:    cancel,
	}, nil
}

// Name implements engine.Backend.
func (e *Engine) Name() string { return e.cfg.Name }

// Recipe implements engine.Backend: the recipe of the files the running
// child loaded (before the first start, of the files as New found them).
func (e *Engine) Recipe() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recipe
}

// Fidelity implements engine.Backend.
func (e *Engine) Fidelity() wire.Fidelity { return e.cfg.Fidelity }

// UJPerToken implements engine.Backend.
func (e *Engine) UJPerToken() uint64 { return e.cfg.UJPerToken }

// PID is the running child's process id, 0 while none is healthy.
func (e *Engine) PID() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cur == nil {
		return 0
	}
	return e.cur.pid
}

// Restarts counts the children started by the supervisor after crashes.
func (e *Engine) Restarts() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.restarts
}

// LastError is the most recent crash or failed restart, nil if none.
func (e *Engine) LastError() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastErr
}

// Start reads the runner's --help to choose its flags, starts the child and
// waits until it is healthy; ctx bounds only this wait. On success a
// supervisor keeps the engine running until Stop. A failed Start leaves
// nothing running and may be retried.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	switch e.state {
	case starting, running:
		e.mu.Unlock()
		return errors.New("engine already started")
	case stopped:
		e.mu.Unlock()
		return ErrStopped
	}
	e.state = starting
	e.starts.Add(1)
	e.mu.Unlock()
	defer e.starts.Done()

	in, err := e.start(ctx)
	e.mu.Lock()
	if err != nil {
		if e.state == starting {
			e.state = idle
		}
		e.mu.Unlock()
		return err
	}
	if e.state == stopped { // Stop ran while we were starting
		e.mu.Unlock()
		in.kill()
		return ErrStopped
	}
	e.state = running
	e.setUpLocked(in)
	e.mu.Unlock()
	go e.supervise(in)
	return nil
}

func (e *Engine) start(ctx context.Context) (*instance, error) {
	// Stop must be able to interrupt a start in progress.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	help, err := readHelp(ctx, e.runner, e.cfg.Env)
	if err != nil {
		return nil, fmt.Errorf("starting engine: %w", err)
	}
	args, err := buildArgs(e.cfg, helpText(help))
	if err != nil {
		return nil, fmt.Errorf("starting engine: %w", err)
	}
	e.mu.Lock()
	e.args = args
	e.mu.Unlock()
	return e.startInstance(ctx)
}

// startInstance runs the child until healthy, retrying on a lost port race,
// and names what it loaded.
func (e *Engine) startInstance(ctx context.Context) (*instance, error) {
	before, err := e.cfg.Recipes.Recipe(ctx, e.files)
	if err != nil {
		return nil, fmt.Errorf("starting engine: %w", err)
	}
	e.mu.Lock()
	args := e.args
	e.mu.Unlock()
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("starting engine: %w", err)
		}
		in, err := spawn(e.runner, args, e.cfg.Env, port, func(line string) { e.cfg.Log.Debug("engine output", "line", line) })
		if err != nil {
			return nil, err
		}
		e.cfg.Log.Info("engine started", "runner", e.runner, "pid", in.pid, "port", port)
		err = in.waitHealthy(ctx, e.client, e.cfg.HealthTimeout, e.cfg.HealthInterval)
		var he *errHealth
		if errors.As(err, &he) && he.bind && attempt < bindAttempts {
			e.cfg.Log.Warn("engine port was taken; retrying on another", "port", port, "err", err)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("starting engine %s: %w", e.runner, err)
		}
		// The files are named again now that they are loaded: a model
		// replaced between hashing and loading must not be misnamed.
		after, err := e.cfg.Recipes.Recipe(ctx, e.files)
		if err == nil && after.String() != before.String() {
			err = fmt.Errorf("model files changed while the engine was loading them (%s became %s)", before, after)
		}
		if err != nil {
			in.kill()
			return nil, fmt.Errorf("starting engine: %w", err)
		}
		in.recipe = before.String()
		in.nCtx = readContext(ctx, e.client, in.base)
		e.cfg.Log.Info("engine healthy", "pid", in.pid, "recipe", in.recipe, "context", in.nCtx)
		return in, nil
	}
}

func (e *Engine) setUpLocked(in *instance) {
	e.cur = in
	e.recipe = in.recipe
	if in.nCtx > 0 {
		e.nCtx = in.nCtx
	}
	close(e.up)
}

// markDown records that in is no longer serving. Serve calls it too when
// it sees the child gone before the supervisor has, so that the next serve
// waits for the restart instead of dialling a dead port.
func (e *Engine) markDown(in *instance, why error) {
	e.mu.Lock()
	if e.cur == in {
		e.cur = nil
		e.up = make(chan struct{})
	}
	if why != nil {
		e.lastErr = why
	}
	e.mu.Unlock()
	e.transport.CloseIdleConnections()
	e.hop.closeIdle()
}

// supervise restarts the child whenever it exits, until Stop.
func (e *Engine) supervise(in *instance) {
	defer close(e.supDone)
	bo := newBackoff(e.cfg.RestartBackoff, e.cfg.MaxRestartBackoff, e.cfg.HealthyReset)
	for {
		select {
		case <-e.life.Done():
			return
		case <-in.exited:
		}
		_ = killGroup(in.pid) // helpers it left behind
		uptime := time.Since(in.healthy)
		crash := fmt.Errorf("%w: pid %d (%s) after %v; last output: %s",
			ErrCrashed, in.pid, in.exitStatus(), uptime.Round(time.Millisecond), in.tail.String())
		e.cfg.Log.Warn("engine crashed", "err", crash)
		e.markDown(in, crash)

		delay := bo.afterCrash(uptime)
		for {
			t := time.NewTimer(delay)
			select {
			case <-e.life.Done():
				t.Stop()
				return
			case <-t.C:
			}
			next, err := e.startInstance(e.life)
			if e.life.Err() != nil {
				return // startInstance has killed any child it began
			}
			if err != nil {
				e.cfg.Log.Error("engine restart failed", "err", err)
				e.mu.Lock()
				e.lastErr = err
				e.mu.Unlock()
				delay = bo.afterFailedStart()
				continue
			}
			e.mu.Lock()
			if e.state == stopped {
				e.mu.Unlock()
				next.kill()
				return
			}
			e.restarts++
			n := e.restarts
			e.setUpLocked(next)
			e.mu.Unlock()
			e.cfg.Log.Warn("engine restarted", "pid", next.pid, "restart", n)
			in = next
			break
		}
	}
}

// Stop ends the supervisor and the child: SIGTERM to its process group,
// then SIGKILL after Config.StopGrace or when ctx ends, whichever is first.
// It returns once the child has been reaped. Stop is idempotent.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if e.state == stopped {
		e.mu.Unlock()
		return nil
	}
	supervising := e.state == running
	e.state = stopped
	close(e.stopped)
	e.mu.Unlock()

	e.cancel()
	e.starts.Wait() // a Start in progress sees stopped and kills its child
	if supervising {
		<-e.supDone
	}
	e.mu.Lock()
	in := e.cur
	e.cur = nil
	e.mu.Unlock()
	var err error
	if in != nil {
		err = in.terminate(ctx, e.cfg.StopGrace)
		e.cfg.Log.Info("engine stopped", "pid", in.pid, "exit", in.exitStatus())
	}
	e.transport.CloseIdleConnections()
	e.hop.close()
	return err
}

// ready returns the healthy child, waiting through a restart if need be.
func (e *Engine) ready(ctx context.Context) (*instance, error) {
	for {
		e.mu.Lock()
		state, in, up, last := e.state, e.cur, e.up, e.lastErr
		e.mu.Unlock()
		switch {
		case state == stopped:
			return nil, ErrStopped
		case state != running:
			return nil, ErrNotStarted
		case in != nil && !in.hasExited():
			return in, nil
		case in != nil:
			e.markDown(in, nil) // the supervisor will record why
			continue
		}
		select {
		case <-up:
		case <-e.stopped:
			return nil, ErrStopped
		case <-ctx.Done():
			return nil, fmt.Errorf("engine is restarting (last failure: %v): %w", last, ctx.Err())
		}
	}
}

// slotKey marks a context that holds an engine's slot (see Acquire).
type slotKey struct{}

// Acquire implements engine.Slotted: it takes the engine's one serving
// slot, so that the caller can open its meter window after the wait.
func (e *Engine) Acquire(ctx context.Context) (context.Context, func(), error) {
	select {
	case e.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for the engine: %w", ctx.Err())
	}
	var once sync.Once
	return context.WithValue(ctx, slotKey{}, e), func() { once.Do(func() { <-e.slot }) }, nil
}

// Embeds implements engine.Embedder: an engine started with Embedding
// serves embedding serves only.
func (e *Engine) Embeds() bool { return e.cfg.Embedding }

// Serve implements engine.Backend: one /completion on the healthy child.
// The prompt must be UTF-8 text whose content id is req.PromptHash.
func (e *Engine) Serve(ctx context.Context, req wire.ServeRequest, prompt []byte) (engine.Result, error) {
	return e.ServeWith(ctx, req, prompt, engine.Options{})
}

// ServeWith implements engine.OptionBackend. The prompt must be UTF-8
// whose content id is req.PromptHash: the prompt text, or with opts.Chat
// the messages (engine.ParseChat), which the child renders with the
// model's own template (POST /apply-template) before the rendered prompt
// runs through /completion as any other. With opts.Emit the completion is
// streamed and each event's content is emitted as it arrives (see
// stream.go), unless opts.Whole: then it is answered whole and nothing is
// emitted.
func (e *Engine) ServeWith(ctx context.Context, req wire.ServeRequest, prompt []byte, opts engine.Options) (engine.Result, error) {
	if err := req.Validate(); err != nil {
		return engine.Result{}, fmt.Errorf("serve: %w", err)
	}
	if wire.ContentOf(prompt) != req.PromptHash {
		return engine.Result{}, fmt.Errorf("serve: %w: the prompt's content id is not prompt_hash", wire.ErrBadRequest)
	}
	if c := e.TokenCap(); req.MaxTokens > c {
		// n_predict is a signed 32-bit int in the child: a larger value
		// would reach it wrapped. Refused here even if the caller did not.
		return engine.Result{}, fmt.Errorf("serve: %w: %w: %d > %d", wire.ErrBadRequest, engine.ErrTooManyTokens, req.MaxTokens, c)
	}
	if err := engine.CheckStop(opts.Stop); err != nil {
		return engine.Result{}, fmt.Errorf("serve: %w", err)
	}
	if !utf8.Valid(prompt) {
		// JSON would silently replace invalid bytes, serving a prompt
		// other than the one whose hash the receipt names.
		return engine.Result{}, fmt.Errorf("serve: %w: the prompt is not valid UTF-8 text", wire.ErrBadRequest)
	}
	if opts.Embed != e.cfg.Embedding {
		return engine.Result{}, fmt.Errorf("serve: backend %s: %w (embedding engine: %v)", e.cfg.Name, engine.ErrNoEmbed, e.cfg.Embedding)
	}
	if opts.Embed {
		texts, err := engine.ParseEmbedInput(prompt)
		if err != nil {
			return engine.Result{}, fmt.Errorf("serve: %w", err)
		}
		vecs, tokens, err := e.Embed(ctx, texts)
		if err != nil {
			return engine.Result{}, err
		}
		return engine.EmbedResult(vecs, tokens)
	}
	var msgs []engine.ChatMessage
	if opts.Chat {
		var err error
		if msgs, err = engine.ParseChat(prompt); err != nil {
			return engine.Result{}, fmt.Errorf("serve: %w", err)
		}
	}
	if held, _ := ctx.Value(slotKey{}).(*Engine); held != e {
		select {
		case e.slot <- struct{}{}:
			defer func() { <-e.slot }()
		case <-ctx.Done():
			return engine.Result{}, fmt.Errorf("serve: waiting for the engine: %w", ctx.Err())
		}
	}
	in, err := e.ready(ctx)
	if err != nil {
		return engine.Result{}, fmt.Errorf("serve: %w", err)
	}
	text := string(prompt)
	if opts.Chat {
		if text, err = e.applyTemplate(ctx, in, msgs); err != nil {
			return engine.Result{}, err
		}
	}
	// A caller that takes the output whole (opts.Whole) is answered by
	// one plain /completion: streaming only to time the first piece
	// would cost every such serve the events' writes and reads.
	streamed := opts.Emit != nil && !opts.Whole
	creq := completionRequest{
		Prompt:       text,
		NPredict:     req.MaxTokens,
		CachePrompt:  true,
		Temperature:  e.cfg.Temperature,
		Seed:         e.cfg.Seed,
		ReturnTokens: true,
		Stream:       streamed,
		Stop:         opts.Stop,
	}
	if streamed {
		return e.stream(ctx, in, creq, opts.Emit)
	}
	return e.complete(ctx, in, creq)
}

// post sends body as JSON to path on the child. A request that gets no
// answer is classified by serveFailed.
func (e *Engine) post(ctx context.Context, in *instance, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("serve: encoding request: %w", err)
	}
	resp, err := e.hop.post(ctx, in.base, path, b)
	if err != nil {
		return nil, e.serveFailed(ctx, in, err)
	}
	return resp, nil
}

// readBody reads a whole answer of at most maxResponse bytes.
func (e *Engine) readBody(ctx context.Context, in *instance, resp *http.Response) ([]byte, error) {
	data, err := readAll(io.LimitReader(resp.Body, maxResponse+1), resp.ContentLength)
	if err != nil {
		return nil, e.serveFailed(ctx, in, err)
	}
	if len(data) > maxResponse {
		return nil, fmt.Errorf("serve: %w: body exceeds %d bytes", ErrBadResponse, maxResponse)
	}
	return data, nil
}

// readAll is io.ReadAll into a buffer sized for the announced length
// (when there is one within maxResponse): growing from io.ReadAll's 512
// bytes was the largest part of a serve's allocations. One byte more than
// announced lets the read that meets the end find room without growing.
func readAll(r io.Reader, announced int64) ([]byte, error) {
	size := 512
	if announced >= 0 && announced <= maxResponse {
		size = int(announced) + 1
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// complete runs one non-streamed /completion.
func (e *Engine) complete(ctx context.Context, in *instance, creq completionRequest) (engine.Result, error) {
	resp, err := e.post(ctx, in, "/completion", creq)
	if err != nil {
		return engine.Result{}, err
	}
	defer resp.Body.Close()
	data, err := e.readBody(ctx, in, resp)
	if err != nil {
		return engine.Result{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return engine.Result{}, fmt.Errorf("serve: engine answered HTTP %d: %s", resp.StatusCode, engineError(data))
	}
	o, content, stopped, err := parseCompletionStop(data, creq.NPredict, e.cfg.DraftModel != "")
	if err != nil {
		return engine.Result{}, fmt.Errorf("serve: %w", err)
	}
	return engine.Result{Outcome: o, Output: []byte(content), Stopped: stopped}, nil
}

// serveFailed names why a request broke off: the caller's context, the
// child dying (the supervisor will restart it), or the connection itself.
func (e *Engine) serveFailed(ctx context.Context, in *instance, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("serve: %w", ctx.Err())
	}
	t := time.NewTimer(e.cfg.CrashWait)
	defer t.Stop()
	select {
	case <-in.exited:
		crash := fmt.Errorf("%w during the serve: pid %d (%s); last output: %s; request error: %v",
			ErrCrashed, in.pid, in.exitStatus(), in.tail.String(), err)
		e.markDown(in, crash)
		return fmt.Errorf("serve: %w", crash)
	case <-t.C:
		return fmt.Errorf("serve: engine request failed (pid %d still running): %w", in.pid, err)
	case <-ctx.Done():
		return fmt.Errorf("serve: %w (after: %v)", ctx.Err(), err)
	}
}

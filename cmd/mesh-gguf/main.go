// Command mesh-gguf is a pure-Go GGUF runner for llama-architecture
// models that speaks the subset of llama-server's HTTP API meshd uses. It
// needs nothing installed: it is the engine of last resort on a fresh
// machine.
//
// general.architecture chooses the model code: "llama" and "qwen2" run as
// generative models, "bert" as an embedding-only encoder (e5, bge,
// all-MiniLM), which serves /embedding and /v1/embeddings whether or not
// --embedding is given (it has nothing else to serve), answers 501 to
// completions, and gives every slot the whole context (an encoder keeps
// no KV cache to divide).
//
// Flags follow llama-server: -m, --host, --port, -c (the context in all;
// 0 means the trained context capped at 4096, more than the trained
// context is refused), -np (slots; each gets its own KV cache of c/np
// positions, the weights and the thread pool are shared), -t,
// --embedding, plus --max-body-bytes (413 beyond; 8 MiB by default) and
// --t-max-predict-ms (a default generation time limit).
//
// -md (--model-draft) adds a draft model for speculative decoding; it must
// share the model's vocabulary. --draft-max (--draft, --draft-n),
// --draft-min (--draft-n-min) and --draft-p-min bound the drafts as
// llama-server's flags do; the draft length adapts to the acceptance
// within them unless --draft-fixed is given. Greedy completions then
// report timings.draft_n and timings.draft_n_accepted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"meshd/engine/runner/bert"
	"meshd/engine/runner/chat"
	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/llama"
	"meshd/engine/runner/llamaserver"
	"meshd/internal/buildinfo"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed, exit 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-gguf:", err)
		os.Exit(1)
	}
}

type options struct {
	model        string
	host         string
	port         int
	ctx          int
	threads      int
	parallel     int
	embeddings   bool
	maxBody      int64
	tMaxPredict  int
	chatTemplate string
	similarity   float64
	version      bool
	draft        string
	spec         llama.SpecParams
	kv           llama.StateOptions // --cache-type-k, --cache-type-v
}

// DefaultContext is the context size used when -c is 0 and the model was
// trained on more: a model's trained context can be 2^20 positions, whose
// KV cache no small machine can hold.
const DefaultContext = 4096

// minSlotContext is the smallest per-slot context accepted.
const minSlotContext = 8

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mesh-gguf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "m", "", "model file (GGUF v3, llama architecture)")
	fs.StringVar(&o.model, "model", "", "model file")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.port, "port", 8080, "port to listen on (0: any free port)")
	fs.IntVar(&o.ctx, "c", 0, fmt.Sprintf("context size in all, split evenly over the slots (0: the model's training context, at most %d); more than the training context is refused", DefaultContext))
	fs.IntVar(&o.ctx, "ctx-size", 0, "context size")
	fs.IntVar(&o.threads, "t", runtime.NumCPU(), "threads for the matrix products (one pool shared by all slots)")
	fs.IntVar(&o.threads, "threads", runtime.NumCPU(), "threads")
	fs.IntVar(&o.parallel, "np", 1, "slots: requests served at once, each with its own KV cache of c/np positions")
	fs.IntVar(&o.parallel, "parallel", 1, "slots")
	fs.BoolVar(&o.embeddings, "embedding", false, "serve /embedding and /v1/embeddings")
	fs.BoolVar(&o.embeddings, "embeddings", false, "serve /embedding and /v1/embeddings")
	fs.Int64Var(&o.maxBody, "max-body-bytes", llamaserver.DefaultMaxBodyBytes, "largest request body accepted (413 beyond)")
	fs.IntVar(&o.tMaxPredict, "t-max-predict-ms", 0, "default time limit of a generation in ms from its first token (0: none); a request's t_max_predict_ms overrides it")
	fs.StringVar(&o.chatTemplate, "chat-template", "", "Jinja chat template (default: the model's tokenizer.chat_template)")
	fs.StringVar(&o.draft, "md", "", "draft model for speculative decoding (GGUF, the model's vocabulary)")
	fs.StringVar(&o.draft, "model-draft", "", "draft model")
	fs.IntVar(&o.spec.Max, "draft-max", llama.DefaultDraftMax, "most tokens drafted per verifying pass, in [1, 256]")
	fs.IntVar(&o.spec.Max, "draft", llama.DefaultDraftMax, "draft-max")
	fs.IntVar(&o.spec.Max, "draft-n", llama.DefaultDraftMax, "draft-max")
	fs.IntVar(&o.spec.Min, "draft-min", llama.DefaultDraftMin, "fewest drafted tokens worth a verifying pass (a shorter draft is dropped)")
	fs.IntVar(&o.spec.Min, "draft-n-min", llama.DefaultDraftMin, "draft-min")
	fs.Float64Var(&o.spec.PMin, "draft-p-min", llama.DefaultDraftPMin, "end a draft at a token the draft model gives less probability than this")
	fs.BoolVar(&o.spec.Fixed, "draft-fixed", false, "draft up to --draft-max tokens every pass (default: the length adapts to the acceptance)")
	fs.Float64Var(&o.similarity, "slot-prompt-similarity", llamaserver.DefaultSlotPromptSimilarity, "with several slots, take the idle one whose cache holds more than this fraction of the prompt as a prefix (the most), else the one idle longest (0: always the one idle longest)")
	fs.Float64Var(&o.similarity, "sps", llamaserver.DefaultSlotPromptSimilarity, "slot prompt similarity")
	fs.Bool("no-warmup", false, "accepted for llama-server compatibility; there is no warmup")
	fs.BoolVar(&o.version, "version", false, "print the version (module, VCS revision, Go version, architecture) and exit")
	kvFlag := func(dst *llama.KVType) func(string) error {
		return func(s string) (err error) { *dst, err = llama.ParseKVType(s); return err }
	}
	kvUsage := "KV cache storage of keys (-ctk) or values (-ctv): " + strings.Join(llama.KVTypeNames, ", ") + " (default f32)"
	for _, n := range []string{"ctk", "cache-type-k"} {
		fs.Func(n, kvUsage, kvFlag(&o.kv.CacheK))
	}
	for _, n := range []string{"ctv", "cache-type-v"} {
		fs.Func(n, kvUsage, kvFlag(&o.kv.CacheV))
	}
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mesh-gguf -m MODEL.gguf [flags]   (flags follow llama-server; -x and --x are the same)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.version {
		return o, nil
	}
	switch {
	case o.model == "":
		return o, errors.New("no model: pass -m FILE")
	case o.parallel < 1 || o.parallel > 256:
		return o, fmt.Errorf("-np %d: must be in [1, 256]", o.parallel)
	case o.draft != "" && (o.spec.Max < 1 || o.spec.Max > 256 || o.spec.Min < 0 || o.spec.Min > o.spec.Max || !(o.spec.PMin >= 0 && o.spec.PMin <= 1)):
		return o, fmt.Errorf("--draft-max %d, --draft-min %d, --draft-p-min %v: want 1 ≤ min ≤ max ≤ 256 (min may be 0) and p-min in [0, 1]", o.spec.Max, o.spec.Min, o.spec.PMin)
	case !(o.similarity >= 0 && o.similarity <= 1):
		return o, fmt.Errorf("--slot-prompt-similarity %g: must be in [0, 1]", o.similarity)
	case o.ctx < 0 || o.threads < 1 || o.port < 0 || o.port > 65535 || o.maxBody < 1 || o.tMaxPredict < 0:
		return o, errors.New("-c, -t, --port, --max-body-bytes and --t-max-predict-ms must be in range")
	}
	return o, nil
}

// slotContext sizes each slot's KV cache as llama-server does: the total
// context (ctx, or when 0 the trained context capped at DefaultContext)
// split evenly over the slots. A total beyond the trained context is
// refused.
func slotContext(trained, ctx, slots int) (total, perSlot int, err error) {
	total = ctx
	if total == 0 {
		total = min(trained, DefaultContext)
	}
	if total > trained {
		return 0, 0, fmt.Errorf("-c %d exceeds the model's trained context of %d", total, trained)
	}
	perSlot = total / slots
	if perSlot < minSlotContext {
		return 0, 0, fmt.Errorf("-c %d over %d slots leaves %d positions per slot (need at least %d)", total, slots, perSlot, minSlotContext)
	}
	return total, perSlot, nil
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, buildinfo.Read().String())
		return nil
	}
	// Bind before loading, as llama-server does: /health answers 503
	// "Loading model" until the weights are in.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(stderr, "mesh-gguf: listening on http://%s\n", ln.Addr())
	srv := &llamaserver.Server{ModelPath: o.model, MaxBodyBytes: o.maxBody, Embeddings: o.embeddings,
		MaxPredict: time.Duration(o.tMaxPredict) * time.Millisecond}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	start := time.Now()
	f, err := gguf.Open(o.model)
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	pool := kernels.NewPool(o.threads)
	defer pool.Close()
	if arch, _ := f.String("general.architecture"); arch == bert.Arch {
		m, states, err := loadEncoder(f, o, pool)
		if err != nil {
			return err
		}
		if !o.embeddings {
			fmt.Fprintf(stderr, "mesh-gguf: %s is an embedding-only architecture: serving /embedding without --embedding\n", bert.Arch)
		}
		srv.Embeddings = true
		sig := takeSignals()
		srv.ReadyEncoder(m, states...)
		fmt.Fprintf(stderr, "mesh-gguf: model %s loaded in %v (%s encoder, %d layers, dim %d, vocab %d, pooling %s, %d slots × %d tokens, %d threads)\n",
			o.model, time.Since(start).Round(time.Millisecond), bert.Arch, m.Layers, m.Dim, m.Vocab, m.Pooling, o.parallel, states[0].Ctx(), o.threads)
		return serve(hs, serveErr, sig, stderr)
	}
	m, err := llama.Load(f)
	if err != nil {
		return fmt.Errorf("load model %s: %w", o.model, err)
	}
	total, perSlot, err := slotContext(m.TrainedContext(), o.ctx, o.parallel)
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	srv.ChatTemplate = o.chatTemplate
	srv.SlotPromptSimilarity = o.similarity
	if o.similarity == 0 {
		srv.SlotPromptSimilarity = -1 // llama-server's 0: no choice by prefix
	}
	if srv.ChatTemplate == "" {
		srv.ChatTemplate, _ = f.String(chat.MetadataKey)
	}
	if srv.ChatTemplate != "" {
		if _, err := chat.Parse(srv.ChatTemplate); err != nil {
			fmt.Fprintf(stderr, "mesh-gguf: warning: %v: /v1/chat/completions will answer 500\n", err)
		}
	}
	states := make([]*llama.State, o.parallel)
	for i := range states {
		if states[i], err = m.NewStateWith(perSlot, pool, o.kv); err != nil {
			return fmt.Errorf("load model: %w", err)
		}
	}
	if o.draft != "" {
		drafts, closeDraft, err := loadDrafts(m, o, pool, perSlot)
		if err != nil {
			return err
		}
		defer closeDraft()
		srv.Speculate(drafts...)
		fmt.Fprintf(stderr, "mesh-gguf: draft model %s (%d layers, dim %d), drafts of %d..%d tokens, p-min %g, %s length\n",
			o.draft, drafts[0].Model().Layers, drafts[0].Model().Dim, max(o.spec.Min, 1), o.spec.Max, o.spec.PMin,
			map[bool]string{true: "fixed", false: "adaptive"}[o.spec.Fixed])
	}
	sig := takeSignals()
	srv.Ready(m, states...)
	fmt.Fprintf(stderr, "mesh-gguf: model %s loaded in %v (%d layers, dim %d, vocab %d, n_ctx %d = %d slots × %d, trained %d, %d threads, KV cache %s/%s)\n",
		o.model, time.Since(start).Round(time.Millisecond), m.Layers, m.Dim, m.Vocab, total, o.parallel, perSlot,
		m.TrainedContext(), o.threads, o.kv.CacheK, o.kv.CacheV)
	return serve(hs, serveErr, sig, stderr)
}

// loadDrafts loads the draft model and a drafter per slot, each with a
// cache of the slot's size (the draft's trained context if smaller: a
// draft that cannot hold the sequence drafts nothing). The draft must
// share m's vocabulary. The returned func closes the draft's file.
func loadDrafts(m *llama.Model, o options, pool *kernels.Pool, perSlot int) ([]*llama.Drafter, func(), error) {
	f, err := gguf.Open(o.draft)
	if err != nil {
		return nil, nil, fmt.Errorf("load draft model: %w", err)
	}
	dm, err := llama.Load(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("load draft model %s: %w", o.draft, err)
	}
	drafts := make([]*llama.Drafter, o.parallel)
	for i := range drafts {
		st, err := dm.NewState(min(perSlot, dm.TrainedContext()), pool)
		if err == nil {
			drafts[i], err = llama.NewDrafter(m, st, o.spec)
		}
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("draft model %s: %w", o.draft, err)
		}
	}
	return drafts, func() { f.Close() }, nil
}

// loadEncoder loads a BERT model and a state per slot, each taking
// inputs up to the whole context (-c, or the trained context when 0; more
// is refused).
func loadEncoder(f *gguf.File, o options, pool *kernels.Pool) (*bert.Model, []*bert.State, error) {
	m, err := bert.Load(f)
	if err != nil {
		return nil, nil, fmt.Errorf("load model %s: %w", o.model, err)
	}
	n := o.ctx
	if n == 0 {
		n = m.TrainedContext()
	}
	if n > m.TrainedContext() {
		return nil, nil, fmt.Errorf("load model: -c %d exceeds the model's trained context of %d", n, m.TrainedContext())
	}
	states := make([]*bert.State, o.parallel)
	for i := range states {
		if states[i], err = m.NewState(n, pool); err != nil {
			return nil, nil, fmt.Errorf("load model: %w", err)
		}
	}
	return m, states, nil
}

// takeSignals takes over SIGTERM and interrupts. It is called only once
// the model is loaded, like llama-server: a SIGTERM during load ends the
// process at once.
func takeSignals() chan os.Signal {
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	return sig
}

// serve runs until the listener fails or a signal asks to stop.
func serve(hs *http.Server, serveErr <-chan error, sig chan os.Signal, stderr io.Writer) error {
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case s := <-sig:
		fmt.Fprintf(stderr, "mesh-gguf: %v: shutting down\n", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sig
		fmt.Fprintln(stderr, "mesh-gguf: second signal: exiting")
		os.Exit(1)
	}()
	if err := hs.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

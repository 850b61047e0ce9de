// Command mesh-gguf is a pure-Go GGUF runner for llama-architecture
// models that speaks the subset of llama-server's HTTP API meshd uses. It
// needs nothing installed: it is the engine of last resort on a fresh
// machine.
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
	"syscall"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
	"meshd/engine/runner/llama"
	"meshd/engine/runner/llamaserver"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mesh-gguf:", err)
		os.Exit(1)
	}
}

type options struct {
	model    string
	host     string
	port     int
	ctx      int
	threads  int
	parallel int
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mesh-gguf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "m", "", "model file (GGUF v3, llama architecture)")
	fs.StringVar(&o.model, "model", "", "model file")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on")
	fs.IntVar(&o.port, "port", 8080, "port to listen on (0: any free port)")
	fs.IntVar(&o.ctx, "c", 0, "context size (0: the model's training context)")
	fs.IntVar(&o.ctx, "ctx-size", 0, "context size")
	fs.IntVar(&o.threads, "t", runtime.NumCPU(), "threads for the matrix products")
	fs.IntVar(&o.threads, "threads", runtime.NumCPU(), "threads")
	fs.IntVar(&o.parallel, "np", 1, "slots (only 1 is supported)")
	fs.IntVar(&o.parallel, "parallel", 1, "slots")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.model == "":
		return o, errors.New("no model: pass -m FILE")
	case o.parallel != 1:
		return o, fmt.Errorf("-np %d: only one slot is supported", o.parallel)
	case o.ctx < 0 || o.threads < 1 || o.port < 0 || o.port > 65535:
		return o, errors.New("-c, -t and --port must be in range")
	}
	return o, nil
}

func run(args []string, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// Bind before loading, as llama-server does: /health answers 503
	// "Loading model" until the weights are in.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	fmt.Fprintf(stderr, "mesh-gguf: listening on http://%s\n", ln.Addr())
	srv := &llamaserver.Server{ModelPath: o.model}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 30 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	start := time.Now()
	f, err := gguf.Open(o.model)
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	defer f.Close()
	m, err := llama.Load(f)
	if err != nil {
		return fmt.Errorf("load model %s: %w", o.model, err)
	}
	nCtx := o.ctx
	if nCtx == 0 {
		nCtx = m.CtxTrain
	}
	pool := kernels.NewPool(o.threads)
	defer pool.Close()
	st, err := m.NewState(nCtx, pool)
	if err != nil {
		return fmt.Errorf("load model: %w", err)
	}
	// Signals are taken over only once loaded, like llama-server: a
	// SIGTERM during load ends the process at once.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	srv.Ready(m, st)
	fmt.Fprintf(stderr, "mesh-gguf: model %s loaded in %v (%d layers, dim %d, vocab %d, n_ctx %d, %d threads)\n",
		o.model, time.Since(start).Round(time.Millisecond), m.Layers, m.Dim, m.Vocab, nCtx, o.threads)

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

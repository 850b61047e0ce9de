package main

// The parts of `meshctl bench run` that are the terminal's and the
// process's: the progress display and a daemon started for the run.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"meshd/agent/api/client"
	"meshd/agent/config"
	"meshd/bench"
	"meshd/steward"
)

// lineProgress writes one plain line per serve: for pipes and logs.
type lineProgress struct {
	mu    sync.Mutex
	w     io.Writer
	total int
}

func (l *lineProgress) Begin(total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total = total
	fmt.Fprintf(l.w, "bench: %d serves\n", total)
}

func (l *lineProgress) Served(n int, s bench.Serve, r *steward.Receipt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "serve %d/%d %s\n", n, l.total, serveLine(s, r))
}

func (l *lineProgress) Note(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, line)
}

func (l *lineProgress) End() {}

// serveLine describes one finished serve.
func serveLine(s bench.Serve, r *steward.Receipt) string {
	kind := fmt.Sprintf("rep %d", s.Rep)
	if s.Warmup {
		kind = "warm-up"
	}
	bound := ""
	if r.ErrorUJ != nil {
		bound = fmt.Sprintf(" ±%d µJ", *r.ErrorUJ)
	}
	return fmt.Sprintf("%s %s: seq %d, %d/%d tokens, %s µJ/token (%s%s)", bench.Cell{Prompt: s.PromptWords, Output: s.MaxTokens}, kind, r.Sequence,
		r.TokensAccepted, r.TokensOut, optU64(r.UJPerAcceptedToken), r.EnergyProvenance, bound)
}

// barProgress is a progress bar with an ETA, for a terminal.
type barProgress struct {
	mu  sync.Mutex
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (b *barProgress) Begin(total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(b.w), progressbar.OptionSetDescription("bench"),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

func (b *barProgress) Served(n int, s bench.Serve, r *steward.Receipt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bar.Describe(fmt.Sprintf("%-9s %s µJ/tok", bench.Cell{Prompt: s.PromptWords, Output: s.MaxTokens}, optU64(r.UJPerAcceptedToken)))
	b.bar.Add(1)
}

func (b *barProgress) Note(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Clear()
	}
	fmt.Fprintln(b.w, line)
	if b.bar != nil {
		b.bar.RenderBlank()
	}
}

func (b *barProgress) End() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Exit()
	}
}

// ---- a daemon for the run ----

// childDaemon is a meshd started for one run.
type childDaemon struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	log    string
}

// startDaemon runs `meshd serve -config path` (the meshd next to meshctl,
// else on PATH) and waits for /readyz. It returns the daemon's address.
func startDaemon(ctx context.Context, path, logPath string, out io.Writer) (*childDaemon, string, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, "", fmt.Errorf("-config: %w", err)
	}
	addr, err := configAddr(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("-config %s: %w", path, err)
	}
	bin, err := findMeshd()
	if err != nil {
		return nil, "", err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", fmt.Errorf("the daemon's log: %w", err)
	}
	cmd := exec.Command(bin, "serve", "-config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: Ctrl-C at the terminal interrupts the
	// harness, which still needs the daemon to close the run and seal the
	// checkpoint before it stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("starting %s: %w", bin, err)
	}
	d := &childDaemon{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() {
		d.err = cmd.Wait()
		logf.Close()
		close(d.exited)
	}()
	fmt.Fprintf(out, "bench: started %s serve -config %s (pid %d, log %s)\n", bin, path, cmd.Process.Pid, logPath)
	c, err := client.New(addr)
	if err != nil {
		d.stop()
		return nil, "", err
	}
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ready(rctx)
		cancel()
		if err == nil {
			return d, addr, nil
		}
		select {
		case <-d.exited:
			return nil, "", fmt.Errorf("meshd exited before it was ready (%v); see %s", d.err, logPath)
		case <-ctx.Done():
			d.stop()
			return nil, "", ctx.Err()
		case <-deadline.C:
			d.stop()
			return nil, "", fmt.Errorf("meshd was not ready within 2 minutes (%v); see %s", err, logPath)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and waits for the daemon to exit (killing it after
// a minute, past any shutdown_timeout it should honour).
func (d *childDaemon) stop() error {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("meshd did not stop within a minute of SIGTERM; killed (log %s)", d.log)
	}
	var ee *exec.ExitError
	if d.err != nil && !errors.As(d.err, &ee) {
		return d.err
	}
	if ee != nil {
		return fmt.Errorf("meshd exited with %v (log %s)", ee, d.log)
	}
	return nil
}

// configAddr is where a daemon run from cfg can be reached: its unix
// socket, else its first TCP address (a wildcard host as loopback).
func configAddr(cfg *config.Config) (string, error) {
	if cfg.Listen.Unix != "" {
		return "unix:" + cfg.Listen.Unix, nil
	}
	if len(cfg.Listen.TCP) == 0 {
		return "", errors.New("it listens nowhere")
	}
	a := cfg.Listen.TCP[0]
	for _, wild := range []string{"0.0.0.0:", "[::]:", ":"} {
		if port, ok := strings.CutPrefix(a, wild); ok {
			return "127.0.0.1:" + port, nil
		}
	}
	return a, nil
}

// findMeshd is the meshd binary next to this meshctl, else on PATH.
func findMeshd() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "meshd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("meshd")
	if err != nil {
		return "", errors.New("-config: no meshd binary next to meshctl or on PATH")
	}
	return p, nil
}

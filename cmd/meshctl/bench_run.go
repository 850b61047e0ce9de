package main

// `meshctl bench run`: serve a workload against a running meshd (or one
// started for the run), record the idle baselines and a power trace, and
// write the signed report. An interrupted run still writes its report,
// marked incomplete, with every serve that finished.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"meshd/agent/api"
	"meshd/agent/api/client"
	"meshd/agent/config"
	"meshd/steward"
)

// runOptions configure one run.
type runOptions struct {
	workload *Workload
	client   *client.Client
	// out is the report path; "" builds the report without writing it.
	out string
	// progress shows the run; nil shows nothing.
	progress progressSink
	// trace records the power trace; off, the trace section is empty.
	trace bool
}

// errInterrupted marks a run stopped by its context (Ctrl-C).
var errInterrupted = errors.New("interrupted")

// runBench runs the workload and returns its report (written to o.out
// when set). On an interruption or a failed serve it still returns, and
// writes, the report of what finished, marked incomplete, with an error
// saying why the run stopped.
func runBench(ctx context.Context, o runOptions) (*benchReport, error) {
	w, c := o.workload, o.client
	p := o.progress
	if p == nil {
		p = quietProgress{}
	}
	body := &reportBody{Format: benchFormat, Workload: *w,
		Status: runStatus{StartedUnixMs: time.Now().UnixMilli(), Harness: "meshctl " + api.Version()}}
	key, err := c.Steward(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the steward key: %w", err)
	}
	body.Steward = hex.EncodeToString(key)
	node, err := c.Node(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the node (GET /v1/node): %w", err)
	}
	body.Board = node.Raw
	backend, metered, err := pickBackend(w, node)
	if err != nil {
		return nil, err
	}
	body.Idle.Backend = backend

	var tr *tracer
	if o.trace {
		tr = startTrace(ctx, c, time.Duration(w.Trace.IntervalMs)*time.Millisecond)
	}
	r := &runner{w: w, c: c, p: p, backend: backend}
	warm, measured := planServes(w)
	p.begin(len(warm) + len(measured))
	stop := r.serveAll(ctx, warm)
	if stop == nil {
		body.Idle.Before = r.idle(ctx, w.Idle.BeforeSeconds, metered)
		stop = ctx.Err()
	}
	if stop == nil {
		stop = r.serveAll(ctx, measured)
	}
	if stop == nil {
		body.Idle.After = r.idle(ctx, w.Idle.AfterSeconds, metered)
		stop = ctx.Err()
	}
	p.end()
	body.Trace = traceSection{Note: traceNote, IntervalMs: w.Trace.IntervalMs, Samples: []client.PowerEvent{}}
	if tr != nil {
		body.Trace.Samples = tr.stop()
	} else {
		body.Trace.Note = "not recorded (" + traceNote + ")"
	}
	switch {
	case stop == nil:
		body.Status.Complete = true
	case ctx.Err() != nil:
		stop = errInterrupted
		body.Status.Incomplete = fmt.Sprintf("interrupted after %d of %d serves", len(r.done), len(warm)+len(measured))
	default:
		body.Status.Incomplete = fmt.Sprintf("stopped after %d of %d serves: %v", len(r.done), len(warm)+len(measured), stop)
	}
	body.Serves = r.served()

	// The evidence is gathered even when the run was interrupted: the
	// finished serves are sealed and belong in the report.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	bySeq, err := r.gather(fctx, body)
	if err != nil {
		return nil, err
	}
	if body.Summary, err = summarise(w, body.Serves, bySeq, body.Idle); err != nil {
		return nil, err
	}
	body.Status.EndedUnixMs = time.Now().UnixMilli()
	rep, err := seal(fctx, c, body)
	if err != nil {
		return nil, err
	}
	if o.out != "" {
		if err := writeReport(o.out, rep); err != nil {
			return nil, err
		}
	}
	if stop != nil {
		return rep, stop
	}
	return rep, nil
}

// pickBackend finds the backend that serves the workload's recipe, and
// whether it is metered (has a span), from GET /v1/node.
func pickBackend(w *Workload, node *client.NodeInfo) (string, bool, error) {
	var names, serving []string
	metered := map[string]bool{}
	for _, b := range node.Backends {
		name, _ := b["name"].(string)
		names = append(names, fmt.Sprintf("%s (%v)", name, b["recipe"]))
		if span, _ := b["span"].(string); span != "" {
			metered[name] = true
		}
		if b["recipe"] == w.Model.Resolved {
			serving = append(serving, name)
		}
	}
	if w.Model.Backend != "" {
		if !slices.Contains(serving, w.Model.Backend) {
			return "", false, fmt.Errorf("model.backend %q does not serve recipe %s here; meshd serves %s", w.Model.Backend, w.Model.Resolved, strings.Join(names, ", "))
		}
		return w.Model.Backend, metered[w.Model.Backend], nil
	}
	switch len(serving) {
	case 0:
		return "", false, fmt.Errorf("no backend of this meshd serves recipe %s; it serves %s", w.Model.Resolved, strings.Join(names, ", "))
	case 1:
		return serving[0], metered[serving[0]], nil
	}
	return "", false, fmt.Errorf("several backends serve recipe %s (%s): name one as model.backend", w.Model.Resolved, strings.Join(serving, ", "))
}

// planServes lists the warm-up serves (cycling through the cells) and the
// measured ones (every cell once per repetition, so drift over the run
// touches every cell alike).
func planServes(w *Workload) (warm, measured []serveRecord) {
	cells := w.cells()
	for i := range w.Matrix.Warmup {
		c := cells[i%len(cells)]
		warm = append(warm, serveRecord{Index: i, Warmup: true, PromptWords: c.prompt, MaxTokens: c.output, Rep: i})
	}
	for rep := range w.Matrix.Repetitions {
		for _, c := range cells {
			measured = append(measured, serveRecord{Index: len(warm) + len(measured), PromptWords: c.prompt, MaxTokens: c.output, Rep: rep})
		}
	}
	return warm, measured
}

// runner runs the serves of one report.
type runner struct {
	w       *Workload
	c       *client.Client
	p       progressSink
	backend string

	mu   sync.Mutex
	done []serveRecord
}

// serveAll runs jobs, Concurrency at a time. It returns nil when all
// finished, the context's error when interrupted, or the first failure
// (after which no new serve starts).
func (r *runner) serveAll(ctx context.Context, jobs []serveRecord) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err })
		cancel()
	}
	next := make(chan serveRecord)
	for range r.w.Matrix.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range next {
				if err := r.serveOne(sctx, job); err != nil {
					if sctx.Err() != nil && ctx.Err() != nil {
						return // interrupted: the serve was abandoned, nothing sealed for it
					}
					fail(err)
					return
				}
			}
		}()
	}
feed:
	for _, job := range jobs {
		select {
		case next <- job:
		case <-sctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// serveOne runs one serve and records it once its receipt is in hand and
// names the workload's model.
func (r *runner) serveOne(ctx context.Context, job serveRecord) error {
	fl := uint8(r.w.Request.FidelityFloor)
	s, err := r.c.Serve(ctx, client.ServeRequest{Prompt: benchPrompt(job.PromptWords, job.MaxTokens, job.Rep, job.Warmup),
		MaxTokens: uint32(job.MaxTokens), FidelityFloor: &fl, JouleCeilingUJ: r.w.Request.JouleCeilingUJ})
	if err != nil {
		return refusal(fmt.Sprintf("serve %d (%s)", job.Index, benchCell{job.PromptWords, job.MaxTokens}), err)
	}
	rc := s.Receipt.Receipt
	if rc.Recipe != r.w.Model.Resolved || rc.Backend != r.backend {
		return fmt.Errorf("serve %d was served by %s (recipe %s), not %s (recipe %s): the router chose another backend; set request.fidelity_floor so only the benchmarked one is admissible",
			job.Index, rc.Backend, rc.Recipe, r.backend, r.w.Model.Resolved)
	}
	job.Sequence = rc.Sequence
	r.mu.Lock()
	r.done = append(r.done, job)
	n := len(r.done)
	r.mu.Unlock()
	r.p.served(n, job, rc)
	return nil
}

// served is the finished serves in the order they were planned.
func (r *runner) served() []serveRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.done)
	slices.SortFunc(out, func(a, b serveRecord) int { return a.Index - b.Index })
	if out == nil {
		out = []serveRecord{}
	}
	return out
}

// idle measures one idle window (nil when the workload asks for none).
func (r *runner) idle(ctx context.Context, seconds float64, metered bool) *idleMeasurement {
	if seconds == 0 {
		return nil
	}
	m := &idleMeasurement{Seconds: seconds}
	if !metered {
		m.Error = fmt.Sprintf("backend %s has no meter: no idle baseline, no net figures", r.backend)
		r.p.note("idle: " + m.Error)
		return m
	}
	r.p.note(fmt.Sprintf("idle: measuring %gs on %s's span", seconds, r.backend))
	rd, err := r.c.Idle(ctx, r.backend, seconds)
	if err != nil {
		m.Error = err.Error()
		r.p.note("idle: " + m.Error)
		return m
	}
	m.Reading = rd
	r.p.note(fmt.Sprintf("idle: %s W mean (%s, ±%d µJ over %s)", milli(rd.MeanPowerUW/1000).String(), rd.Provenance, rd.ErrorUJ,
		time.Duration(rd.WindowNs).Round(time.Millisecond)))
	return m
}

// gather fetches a checkpoint sealed now and the chain segment from the
// run's first receipt to the checkpoint's head, so the head anchors every
// receipt of the run and the segment links them.
func (r *runner) gather(ctx context.Context, body *reportBody) (map[uint64]*steward.Opened, error) {
	bySeq := map[uint64]*steward.Opened{}
	body.Chain.Envelopes = []string{}
	if len(body.Serves) == 0 {
		return bySeq, nil
	}
	first := body.Serves[0].Sequence
	for _, s := range body.Serves {
		first = min(first, s.Sequence)
	}
	cp, err := r.c.Checkpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("sealing the checkpoint that anchors the run: %w", err)
	}
	body.Chain.First = first
	body.Chain.Checkpoint = base64.StdEncoding.EncodeToString(cp.Envelope)
	after := int64(first) - 1
	for uint64(after+1) < cp.Count {
		limit := int(min(uint64(remotePage), cp.Count-uint64(after+1)))
		rs, envs, next, err := r.c.ReceiptEnvelopes(ctx, after, limit)
		if err != nil {
			return nil, fmt.Errorf("reading the chain segment after sequence %d: %w", after, err)
		}
		if len(rs) == 0 {
			return nil, fmt.Errorf("the checkpoint counts %d receipts but the log gave none after sequence %d", cp.Count, after)
		}
		for i, o := range rs {
			bySeq[o.Receipt.Sequence] = o
			body.Chain.Envelopes = append(body.Chain.Envelopes, base64.StdEncoding.EncodeToString(envs[i]))
		}
		after = next
	}
	return bySeq, nil
}

// seal computes the digests, asks the steward to attest the body and
// checks the report as verify will.
func seal(ctx context.Context, c *client.Client, body *reportBody) (*benchReport, error) {
	var err error
	body.Digests = nil
	if body.Digests, err = sectionDigests(body); err != nil {
		return nil, fmt.Errorf("report digests: %w", err)
	}
	sum, err := bodyDigest(body)
	if err != nil {
		return nil, fmt.Errorf("report: canonical form: %w", err)
	}
	rep := &benchReport{Body: *body}
	env, err := c.Attest(ctx, benchFormat, sum)
	if err != nil {
		return nil, fmt.Errorf("asking the steward to attest the report (POST /v1/attest): %w", err)
	}
	rep.Attestation = base64.StdEncoding.EncodeToString(env)
	return rep, nil
}

// writeReport writes the report file whole or not at all.
func writeReport(path string, rep *benchReport) error {
	data, err := encodeReport(rep)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// ---- the power trace ----

// tracer records power events from GET /v1/live until stopped.
type tracer struct {
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []client.PowerEvent
}

func startTrace(ctx context.Context, c *client.Client, interval time.Duration) *tracer {
	tctx, cancel := context.WithCancel(ctx)
	t := &tracer{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		// The trace is display data: a stream that fails leaves a
		// shorter trace, never a failed run.
		_ = c.Live(tctx, interval, func(ev client.LiveEvent) error {
			if ev.Name != "power" {
				return nil
			}
			var p client.PowerEvent
			if json.Unmarshal(ev.Data, &p) != nil {
				return nil
			}
			t.mu.Lock()
			t.samples = append(t.samples, p)
			t.mu.Unlock()
			return nil
		})
	}()
	return t
}

// stop ends the stream and returns what it recorded.
func (t *tracer) stop() []client.PowerEvent {
	t.cancel()
	<-t.done
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.samples == nil {
		return []client.PowerEvent{}
	}
	return t.samples
}

// ---- progress ----

// progressSink shows a run as it goes.
type progressSink interface {
	begin(total int)
	served(n int, s serveRecord, r *steward.Receipt)
	note(line string)
	end()
}

type quietProgress struct{}

func (quietProgress) begin(int)                                 {}
func (quietProgress) served(int, serveRecord, *steward.Receipt) {}
func (quietProgress) note(string)                               {}
func (quietProgress) end()                                      {}

// lineProgress writes one plain line per serve: for pipes and logs.
type lineProgress struct {
	mu    sync.Mutex
	w     io.Writer
	total int
}

func (l *lineProgress) begin(total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total = total
	fmt.Fprintf(l.w, "bench: %d serves\n", total)
}

func (l *lineProgress) served(n int, s serveRecord, r *steward.Receipt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "serve %d/%d %s\n", n, l.total, serveLine(s, r))
}

func (l *lineProgress) note(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintln(l.w, line)
}

func (l *lineProgress) end() {}

// serveLine describes one finished serve.
func serveLine(s serveRecord, r *steward.Receipt) string {
	kind := fmt.Sprintf("rep %d", s.Rep)
	if s.Warmup {
		kind = "warm-up"
	}
	bound := ""
	if r.ErrorUJ != nil {
		bound = fmt.Sprintf(" ±%d µJ", *r.ErrorUJ)
	}
	return fmt.Sprintf("%s %s: seq %d, %d/%d tokens, %s µJ/token (%s%s)", benchCell{s.PromptWords, s.MaxTokens}, kind, r.Sequence,
		r.TokensAccepted, r.TokensOut, optU64(r.UJPerAcceptedToken), r.EnergyProvenance, bound)
}

// barProgress is a progress bar with an ETA, for a terminal.
type barProgress struct {
	mu  sync.Mutex
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (b *barProgress) begin(total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(b.w), progressbar.OptionSetDescription("bench"),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
}

func (b *barProgress) served(n int, s serveRecord, r *steward.Receipt) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bar.Describe(fmt.Sprintf("%-9s %s µJ/tok", benchCell{s.PromptWords, s.MaxTokens}, optU64(r.UJPerAcceptedToken)))
	b.bar.Add(1)
}

func (b *barProgress) note(line string) {
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

func (b *barProgress) end() {
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
	// harness, which still needs the daemon to seal the checkpoint and
	// the attestation before it stops it.
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

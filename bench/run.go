package bench

// Run: open a sealed run on a running meshd, serve the workload in it,
// seal the idle baselines as records of the run, close it, and return the
// report with the chain from the run-open to a checkpoint (`meshctl bench
// run`). An interrupted run is still closed, incomplete, and its report
// keeps every serve the daemon sealed.

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/client"
	"meshd/rag"
	"meshd/steward"
)

// Options configure one run.
type Options struct {
	// Progress shows the run; nil shows nothing.
	Progress Progress
	// Trace records the power trace; off, the trace section is empty.
	Trace bool
	// Harness names the program that runs the workload in the run-open;
	// empty, it is meshctl at this build's version.
	Harness string
	// Caller labels who ran it in the run-open; empty, "meshctl bench run".
	Caller string
}

// ErrInterrupted marks a run stopped by its context (Ctrl-C).
var ErrInterrupted = errors.New("interrupted")

// Run serves the workload w against the meshd c talks to, as a sealed
// run (PROFILE §22), and returns its report. On an interruption or a
// failed serve it still closes the run (the daemon seals it incomplete)
// and returns the report of what finished, with an error saying why the
// run stopped (ErrInterrupted when ctx ended it).
func Run(ctx context.Context, c *client.Client, w *Workload, o Options) (*Report, error) {
	p := o.Progress
	if p == nil {
		p = quietProgress{}
	}
	harness, caller := o.Harness, o.Caller
	if harness == "" {
		harness = "meshctl " + api.Version()
	}
	if caller == "" {
		caller = "meshctl bench run"
	}
	body := &Body{Format: Format, Workload: *w, Status: Status{Harness: harness, Caller: caller}}
	key, err := c.Steward(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the steward key: %w", err)
	}
	body.Steward = hex.EncodeToString(key)
	node, err := c.Node(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the node (GET /v1/node): %w", err)
	}
	backend, metered, err := pickBackend(w, node)
	if err != nil {
		return nil, err
	}
	body.Idle.Backend = backend

	warm, measured := planServes(w)
	wsum, err := sectionSHA256(w)
	if err != nil {
		return nil, fmt.Errorf("the workload's canonical form: %w", err)
	}
	open, err := c.OpenRun(ctx, client.RunOpen{WorkloadSHA256: wsum, Repetitions: uint64(w.Matrix.Repetitions),
		ServesDeclared: uint64(len(warm) + len(measured)), Harness: harness, Caller: caller})
	if err != nil {
		return nil, client.Refusal("opening the run (POST /v1/runs)", err)
	}
	run := open.Sequence
	body.Run.Open = RecordRef{Sequence: run, Document: base64.StdEncoding.EncodeToString(open.Document)}
	if body.Board, err = boardOf(open.Document); err != nil {
		return nil, err
	}

	var tr *tracer
	if o.Trace {
		tr = startTrace(ctx, c, time.Duration(w.Trace.IntervalMs)*time.Millisecond)
	}
	r := &runner{w: w, c: c, p: p, backend: backend, run: run}
	p.Begin(len(warm) + len(measured))
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
	p.End()
	body.Trace = TraceSection{Note: traceNote, IntervalMs: w.Trace.IntervalMs, Samples: []client.PowerEvent{}}
	if tr != nil {
		body.Trace.Samples = tr.stop()
	} else {
		body.Trace.Note = "not recorded (" + traceNote + ")"
	}
	reason := ""
	switch {
	case stop == nil:
	case ctx.Err() != nil:
		stop = ErrInterrupted
		reason = fmt.Sprintf("interrupted after %d of %d serves", len(r.done), len(warm)+len(measured))
	default:
		reason = fmt.Sprintf("stopped after %d of %d serves: %v", len(r.done), len(warm)+len(measured), stop)
		if len(reason) > 256 {
			reason = reason[:253] + "..."
		}
	}

	// The run is closed and the evidence gathered even when the run was
	// interrupted: the finished serves are sealed and belong in the
	// report, and the daemon seals the run incomplete.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	traceSum, err := sectionSHA256(body.Trace)
	if err != nil {
		return nil, fmt.Errorf("the trace's canonical form: %w", err)
	}
	cl, err := c.CloseRunWith(fctx, run, client.RunClose{Reason: reason, TraceSHA256: traceSum})
	if err != nil {
		return nil, client.Refusal(fmt.Sprintf("closing run %d (POST /v1/runs/%d/close)", run, run), err)
	}
	cdoc, err := steward.DecodeRunCloseDoc(cl.Document)
	if err != nil {
		return nil, fmt.Errorf("the run-close document: %w", err)
	}
	body.Run.Close = RecordRef{Sequence: cl.Sequence, Document: base64.StdEncoding.EncodeToString(cl.Document)}
	odoc, err := steward.DecodeRunOpenDoc(open.Document)
	if err != nil {
		return nil, fmt.Errorf("the run-open document: %w", err)
	}
	// The machine state is the steward's, read at open and at close.
	if st, err := StateOf(&odoc, &cdoc); err != nil {
		return nil, err
	} else if st.Open != nil || st.Close != nil {
		body.State = &st
	}
	body.Status.Complete = cdoc.Status == steward.RunComplete
	body.Status.Incomplete = cdoc.Reason
	body.Status.StartedUnixMs = sealedMs(open.Receipt)
	body.Status.EndedUnixMs = sealedMs(cl.Receipt)

	bySeq, err := r.gather(fctx, body, run)
	if err != nil {
		return nil, err
	}
	// The daemon's count is the record: a serve it sealed whose answer
	// the harness never read (an interruption between seal and reply) is
	// found in the chain by its request id.
	if err := r.reconcile(cdoc, bySeq, append(warm, measured...)); err != nil {
		return nil, err
	}
	body.Serves = r.served()
	body.Run.Others = countOthers(bySeq, run)
	if body.Summary, err = Summarise(w, body.Serves, bySeq, body.Idle); err != nil {
		return nil, err
	}
	if body.Digests, err = sectionDigests(body); err != nil {
		return nil, fmt.Errorf("report digests: %w", err)
	}
	rep := &Report{Body: *body}
	if stop != nil {
		return rep, stop
	}
	return rep, nil
}

// sealedMs is a record's x_sealed_unix_ms (0 when it has none, which a
// record always has).
func sealedMs(r *steward.Receipt) int64 {
	if r == nil || r.SealedUnixMs == nil {
		return 0
	}
	return int64(*r.SealedUnixMs)
}

// boardOf is the report's board section from a run-open document: the
// board, meter inventory and version the steward sealed at open.
func boardOf(doc []byte) (json.RawMessage, error) {
	d, err := steward.DecodeRunOpenDoc(doc)
	if err != nil {
		return nil, fmt.Errorf("the run-open document: %w", err)
	}
	ver, _ := json.Marshal(d.Version)
	raw := []byte(`{"board":` + d.Board + `,"meters":` + d.Meters + `,"version":` + string(ver) + `}`)
	c, err := rag.Canonical(raw)
	if err != nil {
		return nil, fmt.Errorf("the run-open document's board and meters are not JSON: %w", err)
	}
	return c, nil
}

// countOthers counts the segment's receipts that are not run's: neither
// its run-open nor carrying x_run = run.
func countOthers(bySeq map[uint64]*steward.Opened, run uint64) int {
	n := 0
	for seq, o := range bySeq {
		if seq != run && (o.Receipt.Run == nil || *o.Receipt.Run != run) {
			n++
		}
	}
	return n
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
func planServes(w *Workload) (warm, measured []Serve) {
	cells := w.Cells()
	for i := range w.Matrix.Warmup {
		c := cells[i%len(cells)]
		warm = append(warm, Serve{Index: i, Warmup: true, PromptWords: c.Prompt, MaxTokens: c.Output, Rep: i})
	}
	for rep := range w.Matrix.Repetitions {
		for _, c := range cells {
			measured = append(measured, Serve{Index: len(warm) + len(measured), PromptWords: c.Prompt, MaxTokens: c.Output, Rep: rep})
		}
	}
	return warm, measured
}

// runner runs the serves of one report.
type runner struct {
	w       *Workload
	c       *client.Client
	p       Progress
	backend string
	run     uint64

	mu   sync.Mutex
	done []Serve
}

// serveAll runs jobs, Concurrency at a time. It returns nil when all
// finished, the context's error when interrupted, or the first failure
// (after which no new serve starts).
func (r *runner) serveAll(ctx context.Context, jobs []Serve) error {
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
	next := make(chan Serve)
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
func (r *runner) serveOne(ctx context.Context, job Serve) error {
	fl := uint8(r.w.Request.FidelityFloor)
	run := r.run
	s, err := r.c.Serve(ctx, client.ServeRequest{Prompt: benchPrompt(job.PromptWords, job.MaxTokens, job.Rep, job.Warmup),
		MaxTokens: uint32(job.MaxTokens), FidelityFloor: &fl, JouleCeilingUJ: r.w.Request.JouleCeilingUJ, Run: &run,
		// A report states the time to first token, which the daemon
		// measures only where the engine produces pieces.
		TimeFirstToken: true})
	if err != nil {
		return client.Refusal(fmt.Sprintf("serve %d (%s)", job.Index, Cell{job.PromptWords, job.MaxTokens}), err)
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
	r.p.Served(n, job, rc)
	return nil
}

// served is the finished serves in the order they were planned.
func (r *runner) served() []Serve {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.done)
	slices.SortFunc(out, func(a, b Serve) int { return a.Index - b.Index })
	if out == nil {
		out = []Serve{}
	}
	return out
}

// idle measures one idle window (nil when the workload asks for none).
func (r *runner) idle(ctx context.Context, seconds float64, metered bool) *IdleMeasurement {
	if seconds == 0 {
		return nil
	}
	m := &IdleMeasurement{Seconds: seconds}
	if !metered {
		m.Error = fmt.Sprintf("backend %s has no meter: no idle baseline, no net figures", r.backend)
		r.p.Note("idle: " + m.Error)
		return m
	}
	r.p.Note(fmt.Sprintf("idle: measuring %gs on %s's span", seconds, r.backend))
	run := r.run
	rec, rd, err := r.c.IdleRecord(ctx, r.backend, seconds, &run)
	if err != nil {
		m.Error = err.Error()
		r.p.Note("idle: " + m.Error)
		return m
	}
	seq := rec.Sequence
	m.Sequence, m.Document = &seq, base64.StdEncoding.EncodeToString(rec.Document)
	r.p.Note(fmt.Sprintf("idle: %s W mean (%s, ±%d µJ over %s), sealed as record %d", Milli(rd.MeanPowerUW/1000).String(), rd.Provenance, rd.ErrorUJ,
		time.Duration(rd.WindowNs).Round(time.Millisecond), seq))
	return m
}

// reconcile adds to the finished serves any serve the run-close counts
// that the harness did not see answered, matched by its request id
// among the planned serves.
func (r *runner) reconcile(d steward.RunCloseDoc, bySeq map[uint64]*steward.Opened, planned []Serve) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := map[uint64]bool{}
	taken := map[int]bool{}
	for _, s := range r.done {
		have[s.Sequence], taken[s.Index] = true, true
	}
	for _, seq := range d.Serves {
		if have[seq] {
			continue
		}
		o := bySeq[seq]
		if o == nil {
			return fmt.Errorf("the run-close counts serve %d, which is not in the chain segment", seq)
		}
		found := false
		for _, job := range planned {
			id, err := benchRequestID(r.w, &job)
			if err != nil || taken[job.Index] || id != o.Receipt.RequestID {
				continue
			}
			job.Sequence, taken[job.Index], found = seq, true, true
			r.done = append(r.done, job)
			break
		}
		if !found {
			return fmt.Errorf("the run-close counts receipt %d, which answers none of the run's planned serves", seq)
		}
	}
	return nil
}

// gather fetches a checkpoint sealed now and the chain segment from the
// run-open to the checkpoint's head, so the head anchors every record and
// serve of the run and the segment links them.
func (r *runner) gather(ctx context.Context, body *Body, first uint64) (map[uint64]*steward.Opened, error) {
	bySeq := map[uint64]*steward.Opened{}
	body.Chain.Envelopes = []string{}
	cp, err := r.c.Checkpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("sealing the checkpoint that anchors the run: %w", err)
	}
	body.Chain.First = first
	body.Chain.Checkpoint = base64.StdEncoding.EncodeToString(cp.Envelope)
	after := int64(first) - 1
	for uint64(after+1) < cp.Count {
		limit := int(min(uint64(chainPage), cp.Count-uint64(after+1)))
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

// WriteFile writes the report file whole or not at all.
func WriteFile(path string, rep *Report) error {
	data, err := Encode(rep)
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

// Progress shows a run as it goes. Its methods are called from the
// serves' goroutines, so an implementation guards its own state.
type Progress interface {
	// Begin is called once, with the number of serves planned.
	Begin(total int)
	// Served is called as each serve's receipt is in hand: n serves
	// have finished, s the latest, r its receipt.
	Served(n int, s Serve, r *steward.Receipt)
	// Note is a line about the run (an idle window measured, say).
	Note(line string)
	// End is called once the serves are over.
	End()
}

type quietProgress struct{}

func (quietProgress) Begin(int)                           {}
func (quietProgress) Served(int, Serve, *steward.Receipt) {}
func (quietProgress) Note(string)                         {}
func (quietProgress) End()                                {}

// chainPage is the page size of a chain walk: the daemon's maximum.
const chainPage = 1000

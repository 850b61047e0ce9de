package agent

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// gatedBackend holds each serve until the test releases it, and says when
// one has started, so a test can act while a serve is in flight.
type gatedBackend struct {
	engine.Backend
	started chan struct{}
	release chan struct{}
}

func (g *gatedBackend) Serve(ctx context.Context, r wire.ServeRequest, p []byte) (engine.Result, error) {
	g.started <- struct{}{}
	<-g.release
	return g.Backend.Serve(ctx, r, p)
}

// testClock is a clock a test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type runFixture struct {
	a      *Agent
	sealer *memSealer
	clock  *testClock
	bad    *countingBackend
}

func newRunFixture(t *testing.T, extra ...engine.Backend) *runFixture {
	t.Helper()
	sealer := newMemSealer(t)
	ok := refs(t, engine.ReferenceConfig{Name: "ok", Fidelity: wire.F2, UJPerToken: 10})
	bad := &countingBackend{Backend: refs(t, engine.ReferenceConfig{Name: "bad", Fidelity: wire.F2, UJPerToken: 20})[0], fail: errors.New("engine crashed")}
	clock := &testClock{t: time.Unix(1_767_225_600, 0)}
	meter := fakeMeter{reading: wire.Reading{EnergyUJ: 700, Provenance: wire.ModelBased, Metering: evidence(wire.ModelBased)}}
	a, err := New(Config{Backends: append(append(ok, bad), extra...), Meter: meter, Steward: sealer, Clock: clock.now, RunTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &runFixture{a: a, sealer: sealer, clock: clock, bad: bad}
}

func (f *runFixture) open(t *testing.T, declared uint64) uint64 {
	t.Helper()
	rec, err := f.a.OpenRun(context.Background(), RunOpen{WorkloadSHA256: fmt.Sprintf("%064x", 1), Repetitions: 1, ServesDeclared: declared,
		Harness: "meshctl test", Caller: "lab", Board: "{}", Version: "test", Meters: "[]"})
	if err != nil {
		t.Fatal(err)
	}
	if err := steward.CheckRecordDocument(rec.Sealed.Receipt, rec.Document); err != nil {
		t.Fatal(err)
	}
	return rec.Sealed.Receipt.Sequence
}

func (f *runFixture) serve(run *uint64, backend, prompt string) (*Response, error) {
	return f.a.ServeWith(context.Background(), promptReq(prompt, wire.F1, 1e9), []byte(prompt), Options{Run: run, Backend: backend})
}

func (f *runFixture) closing(run uint64) bool {
	f.a.runs.mu.Lock()
	defer f.a.runs.mu.Unlock()
	st, ok := f.a.runs.open[run]
	return ok && st.closing
}

func closeDoc(t *testing.T, rec *SealedRecord) steward.RunCloseDoc {
	t.Helper()
	if err := steward.CheckRecordDocument(rec.Sealed.Receipt, rec.Document); err != nil {
		t.Fatal(err)
	}
	d, err := steward.DecodeRunCloseDoc(rec.Document)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Concurrent serves of a run are each counted once, a failed serve not at
// all, a serve outside the run not at all, and the run's idle record is
// listed; every serve of the run carries x_run.
func TestRunCountsWhatItSealed(t *testing.T) {
	f := newRunFixture(t)
	run := f.open(t, 8)
	var wg sync.WaitGroup
	seqs := make(chan uint64, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := f.serve(&run, "ok", fmt.Sprintf("prompt %d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if r := resp.Sealed.Receipt; r.Run == nil || *r.Run != run || r.Record != nil {
				t.Errorf("serve in the run: x_run %v x_record %v", r.Run, r.Record)
			}
			seqs <- resp.Sealed.Receipt.Sequence
		}()
	}
	wg.Wait()
	close(seqs)
	if _, err := f.serve(&run, "bad", "fails"); err == nil || f.bad.calls.Load() != 1 {
		t.Fatalf("the failing backend: %v, %d calls", err, f.bad.calls.Load())
	}
	outside, err := f.serve(nil, "ok", "not in the run")
	if err != nil || outside.Sealed.Receipt.Run != nil {
		t.Fatalf("a serve outside the run: %v", err)
	}
	idle, _, err := f.a.Idle(context.Background(), "ok", time.Millisecond, &run)
	if err != nil {
		t.Fatal(err)
	}
	ir := idle.Sealed.Receipt
	if *ir.Record != steward.RecordIdle || *ir.Run != run || ir.EnergyProvenance != "ModelBased" || ir.EstimatedUJ != 700 || ir.IdleUW != nil ||
		ir.Backend != "ok" || ir.TokensAccepted != 0 {
		t.Fatalf("idle record: %+v", ir)
	}
	if err := steward.CheckRecordDocument(ir, idle.Document); err != nil {
		t.Fatal(err)
	}
	rec, err := f.a.CloseRun(context.Background(), run, "")
	if err != nil {
		t.Fatal(err)
	}
	d := closeDoc(t, rec)
	want := slices.Sorted(func(yield func(uint64) bool) {
		for s := range seqs {
			if !yield(s) {
				return
			}
		}
	})
	if d.Status != steward.RunComplete || d.ServesSealed != 8 || !slices.Equal(d.Serves, want) || !slices.Equal(d.Idle, []uint64{ir.Sequence}) {
		t.Fatalf("run-close: %+v, want serves %v", d, want)
	}
	if r := rec.Sealed.Receipt; *r.Run != run || r.Route != fmt.Sprintf("run close %d: complete, 8 of 8 serves sealed", run) {
		t.Fatalf("run-close receipt: %+v", r)
	}
}

// A serve or idle window naming a run that is not open is refused before
// any engine work or meter window, and seals nothing.
func TestRunNotOpenRefused(t *testing.T) {
	f := newRunFixture(t)
	unknown := uint64(99)
	before := f.sealer.count()
	if _, err := f.serve(&unknown, "bad", "p"); !errors.Is(err, ErrRunNotOpen) || f.bad.calls.Load() != 0 {
		t.Fatalf("unknown run: %v (%d engine calls)", err, f.bad.calls.Load())
	}
	run := f.open(t, 1)
	if _, err := f.a.CloseRun(context.Background(), run, "stopped by the operator"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.serve(&run, "bad", "p"); !errors.Is(err, ErrRunNotOpen) || f.bad.calls.Load() != 0 {
		t.Fatalf("closed run: %v", err)
	}
	if _, _, err := f.a.Idle(context.Background(), "ok", time.Millisecond, &run); !errors.Is(err, ErrRunNotOpen) {
		t.Fatalf("idle in a closed run: %v", err)
	}
	if _, err := f.a.CloseRun(context.Background(), run, ""); !errors.Is(err, ErrRunNotOpen) {
		t.Fatalf("closing twice: %v", err)
	}
	if got := f.sealer.count() - before; got != 2 {
		t.Fatalf("%d records sealed, want the run-open and run-close only", got)
	}
}

// A client's reason, or a shortfall, closes a run as incomplete.
func TestRunIncomplete(t *testing.T) {
	f := newRunFixture(t)
	for _, tc := range []struct {
		reason, want string
		serves       int
	}{
		{"", "1 of 2 declared serves sealed", 1},
		{"interrupted after 2 of 2 serves", "interrupted after 2 of 2 serves", 2},
	} {
		run := f.open(t, 2)
		for i := range tc.serves {
			if _, err := f.serve(&run, "ok", fmt.Sprint("p", i)); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := f.a.CloseRun(context.Background(), run, tc.reason)
		if err != nil {
			t.Fatal(err)
		}
		if d := closeDoc(t, rec); d.Status != steward.RunIncomplete || d.Reason != tc.want {
			t.Fatalf("%+v, want incomplete: %s", d, tc.want)
		}
	}
	if _, err := f.a.CloseRun(context.Background(), 0, "two\nlines"); err == nil {
		t.Fatal("a reason with a newline was accepted")
	}
}

// A run with no request for the run timeout, by the agent's clock, is
// closed as abandoned; one still in use is not; shutdown closes the rest.
func TestRunAbandoned(t *testing.T) {
	f := newRunFixture(t)
	idle := f.open(t, 3)
	busy := f.open(t, 3)
	f.clock.add(59 * time.Second)
	if recs, err := f.a.CloseAbandoned(context.Background()); err != nil || len(recs) != 0 {
		t.Fatalf("before the timeout: %d closed, %v", len(recs), err)
	}
	if _, err := f.serve(&busy, "ok", "keep alive"); err != nil {
		t.Fatal(err)
	}
	f.clock.add(time.Second)
	recs, err := f.a.CloseAbandoned(context.Background())
	if err != nil || len(recs) != 1 {
		t.Fatalf("at the timeout: %d closed, %v", len(recs), err)
	}
	d := closeDoc(t, recs[0])
	if d.Run != idle || d.Status != steward.RunIncomplete || d.Reason != "abandoned: no request of the run for 1m0s" {
		t.Fatalf("abandoned close: %+v", d)
	}
	if _, err := f.serve(&idle, "ok", "late"); !errors.Is(err, ErrRunNotOpen) {
		t.Fatalf("a serve after the abandoned close: %v", err)
	}
	recs, err = f.a.CloseRuns(context.Background(), "abandoned: the daemon shut down")
	if err != nil || len(recs) != 1 {
		t.Fatalf("shutdown: %d closed, %v", len(recs), err)
	}
	if d := closeDoc(t, recs[0]); d.Run != busy || d.ServesSealed != 1 || d.Reason != "abandoned: the daemon shut down" {
		t.Fatalf("shutdown close: %+v", d)
	}
	if len(f.a.OpenRuns()) != 0 {
		t.Fatalf("runs still open: %v", f.a.OpenRuns())
	}
}

// Close waits for the run's serve in flight and counts it; a serve that
// arrives while the run is closing is refused.
func TestRunCloseWaitsForServesInFlight(t *testing.T) {
	gate := &gatedBackend{Backend: refs(t, engine.ReferenceConfig{Name: "gated", Fidelity: wire.F2, UJPerToken: 5})[0],
		started: make(chan struct{}), release: make(chan struct{})}
	f := newRunFixture(t, gate)
	run := f.open(t, 1)
	served := make(chan *Response, 1)
	go func() {
		resp, err := f.serve(&run, "gated", "slow")
		if err != nil {
			t.Error(err)
		}
		served <- resp
	}()
	<-gate.started
	closed := make(chan *SealedRecord, 1)
	go func() {
		rec, err := f.a.CloseRun(context.Background(), run, "")
		if err != nil {
			t.Error(err)
		}
		closed <- rec
	}()
	// Wait until the close has begun, then a new request of the run is
	// refused.
	for !f.closing(run) {
		runtime.Gosched()
	}
	if _, err := f.serve(&run, "ok", "during close"); !errors.Is(err, ErrRunNotOpen) {
		t.Fatalf("a serve while the run was closing: %v", err)
	}
	close(gate.release)
	resp := <-served
	d := closeDoc(t, <-closed)
	if d.Status != steward.RunComplete || !slices.Equal(d.Serves, []uint64{resp.Sealed.Receipt.Sequence}) {
		t.Fatalf("close did not count the serve in flight: %+v", d)
	}
}

package agent

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// stepClock is a simulated clock: every reading advances it by step, and
// an engine may advance it further (the time its first piece takes).
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// slowStart is an OptionBackend whose first piece comes after delay on
// the shared clock: the reference engine with a prefill.
type slowStart struct {
	*engine.Reference
	clk   *stepClock
	delay time.Duration
}

func (s *slowStart) ServeWith(ctx context.Context, req wire.ServeRequest, p []byte, opts engine.Options) (engine.Result, error) {
	s.clk.advance(s.delay)
	return s.Reference.ServeWith(ctx, req, p, opts)
}

// plainOnly hides the reference engine's options: a Backend that cannot
// emit piece by piece.
type plainOnly struct{ engine.Backend }

// wholeWhenAsked is an OptionBackend that answers whole, emitting
// nothing, when the caller takes the output whole (engine.Options.Whole),
// as a child engine does; it records the Whole it was handed.
type wholeWhenAsked struct {
	*engine.Reference
	whole []bool
}

func (w *wholeWhenAsked) ServeWith(ctx context.Context, req wire.ServeRequest, p []byte, opts engine.Options) (engine.Result, error) {
	w.whole = append(w.whole, opts.Whole)
	if opts.Whole {
		opts.Emit = nil
	}
	return w.Reference.ServeWith(ctx, req, p, opts)
}

func newClockedAgent(t *testing.T, clk *stepClock, meter Meter, b engine.Backend) *Agent {
	t.Helper()
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := steward.OpenLog(context.Background(), filepath.Join(t.TempDir(), "r.log"), steward.LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	a, err := New(Config{Backends: []engine.Backend{b}, Meter: meter, Clock: clk.Now, Steward: steward.New(k, l, steward.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The daemon times the first output piece on its own clock from the
// serve's start; the caller's Emit still gets every piece; an engine that
// cannot emit piece by piece, or a serve the meter timed shorter, never
// gets a time past its serve.
func TestFirstTokenMeasured(t *testing.T) {
	ref := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10, Work: 2})[0].(*engine.Reference)
	hw := func(serveNs uint64) Meter {
		m := evidence(wire.HwShunt)
		m.ServeNs = serveNs
		return fakeMeter{reading: wire.Reading{EnergyUJ: 600, Provenance: wire.HwShunt, Metering: m}}
	}
	cases := []struct {
		name      string
		backend   func(*stepClock) engine.Backend
		meter     Meter
		callerOut bool
		want      *uint64 // nil: no x_first_token_ns
		timeFirst bool    // Options.TimeFirstToken
	}{
		// start, first piece, end: one 1 µs step to the first piece.
		{"reference engine", func(*stepClock) engine.Backend { return ref }, nil, false, ptr(1000), false},
		{"caller streams too", func(*stepClock) engine.Backend { return ref }, nil, true, ptr(1000), false},
		{"prefill 3 ms", func(c *stepClock) engine.Backend { return &slowStart{ref, c, 3 * time.Millisecond} }, nil, false, ptr(3_001_000), false},
		{"metered serve", func(c *stepClock) engine.Backend { return &slowStart{ref, c, 300 * time.Microsecond} }, hw(1_000_000), false, ptr(301_000), false},
		// The meter's serve (x_serve_ns) is 200 µs; the agent saw the piece
		// at 301 µs on its clock: held to the serve.
		{"meter's serve shorter", func(c *stepClock) engine.Backend { return &slowStart{ref, c, 300 * time.Microsecond} }, hw(200_000), false, ptr(200_000), false},
		{"no pieces", func(*stepClock) engine.Backend { return plainOnly{ref} }, nil, false, nil, false},
		{"no pieces, caller streams", func(*stepClock) engine.Backend { return plainOnly{ref} }, nil, true, nil, false},
		// A child engine answers a caller that does not stream whole: no
		// piece, so no time is claimed; one that streams is timed.
		{"answered whole", func(*stepClock) engine.Backend { return &wholeWhenAsked{Reference: ref} }, nil, false, nil, false},
		{"answered whole, caller streams", func(*stepClock) engine.Backend { return &wholeWhenAsked{Reference: ref} }, nil, true, ptr(1000), false},
		// A caller that takes the output whole but asks for the first
		// token timed (a benchmark) gets the pieces produced and timed.
		{"whole, first token asked for", func(*stepClock) engine.Backend { return &wholeWhenAsked{Reference: ref} }, nil, false, ptr(1000), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := &stepClock{now: time.UnixMilli(1_767_225_600_000), step: time.Microsecond}
			a := newClockedAgent(t, clk, c.meter, c.backend(clk))
			var got bytes.Buffer
			opts := Options{TimeFirstToken: c.timeFirst}
			if c.callerOut {
				opts.Engine.Emit = func(p []byte) error { got.Write(p); return nil }
			}
			p := "one two three"
			resp, err := a.ServeWith(context.Background(), promptReq(p, wire.F0, 1000), []byte(p), opts)
			if err != nil {
				t.Fatal(err)
			}
			r := resp.Sealed.Receipt
			switch {
			case c.want == nil && r.FirstTokenNs != nil:
				t.Fatalf("x_first_token_ns %d, want none", *r.FirstTokenNs)
			case c.want != nil && (r.FirstTokenNs == nil || *r.FirstTokenNs != *c.want):
				t.Fatalf("x_first_token_ns %v, want %d", r.FirstTokenNs, *c.want)
			case r.FirstTokenNs != nil && *r.FirstTokenNs > *r.ServeNs:
				t.Fatalf("x_first_token_ns %d past x_serve_ns %d", *r.FirstTokenNs, *r.ServeNs)
			}
			if c.callerOut && !bytes.Equal(got.Bytes(), resp.Output) {
				t.Fatalf("the caller's Emit got %q, the output is %q", got.Bytes(), resp.Output)
			}
			if w, ok := a.table.Load().backends[0].(*wholeWhenAsked); ok && (len(w.whole) != 1 || w.whole[0] != (!c.callerOut && !c.timeFirst)) {
				t.Fatalf("the engine was handed Whole %v for a caller that streams: %v, asks for the first token: %v", w.whole, c.callerOut, c.timeFirst)
			}
		})
	}
}

func ptr(v uint64) *uint64 { return &v }

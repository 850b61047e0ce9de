package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// memSealer seals in memory: the steward builds (and checks) each receipt,
// nothing touches a disk. It is the Sealer the agent's tests need.
type memSealer struct {
	st     *steward.Steward
	mu     sync.Mutex
	drafts []steward.Draft
	prev   *wire.ContentID
}

func newMemSealer(t *testing.T) *memSealer {
	t.Helper()
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return &memSealer{st: steward.New(k, nil, steward.Options{})}
}

func (m *memSealer) Public() ed25519.PublicKey { return m.st.Public() }

func (m *memSealer) Seal(ctx context.Context, d steward.Draft) (*steward.Sealed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.st.Build(d, uint64(len(m.drafts)), m.prev, make([]byte, steward.NonceSize), time.Unix(1_767_225_600, 0))
	if err != nil {
		return nil, err
	}
	m.drafts = append(m.drafts, d)
	id := wire.ContentOf([]byte(r.RequestID))
	m.prev = &id
	return &steward.Sealed{Receipt: r, ID: id}, nil
}

func (m *memSealer) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.drafts)
}

// recordMeter counts the windows opened on it.
type recordMeter struct {
	fakeMeter
	mu     sync.Mutex
	opened int
}

func (m *recordMeter) Open(ctx context.Context) (Window, error) {
	m.mu.Lock()
	m.opened++
	m.mu.Unlock()
	return m.fakeMeter, nil
}

func TestPerBackendMetersAndReconfigure(t *testing.T) {
	sealer := newMemSealer(t)
	tiny := refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10})
	big := refs(t, engine.ReferenceConfig{Name: "big", Fidelity: wire.F3, UJPerToken: 100})
	mt := &recordMeter{fakeMeter: fakeMeter{reading: wire.Reading{EnergyUJ: 700, Provenance: wire.ModelBased, Metering: evidence(wire.ModelBased)}}}
	var events []Event
	a, err := New(Config{Backends: append(tiny, big...), Meters: map[string]Meter{"big": mt}, Steward: sealer,
		Observe: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := "one two three"
	// F1 goes to tiny, which has no meter: Estimator, and big's meter is
	// not opened for it.
	resp, err := a.Serve(ctx, promptReq(p, wire.F1, 1e6), []byte(p))
	if err != nil || resp.Sealed.Receipt.Backend != "tiny" || resp.Sealed.Receipt.EnergyProvenance != "Estimator" || mt.opened != 0 {
		t.Fatalf("tiny serve: %v %+v, big's meter opened %d times", err, resp, mt.opened)
	}
	resp, err = a.Serve(ctx, promptReq(p, wire.F3, 1e6), []byte(p))
	if err != nil || resp.Sealed.Receipt.Backend != "big" || resp.Sealed.Receipt.EnergyProvenance != "ModelBased" || mt.opened != 1 {
		t.Fatalf("big serve: %v %+v, meter opened %d times", err, resp, mt.opened)
	}
	if len(events) != 2 || events[0].Backend != "tiny" || events[1].Sealed == nil || events[1].TokensOut != 6 {
		t.Fatalf("events: %+v", events)
	}
	// A meter for a backend that is not registered is refused, and the
	// old table stays.
	if err := a.Reconfigure(Routes{Backends: tiny, Meters: map[string]Meter{"big": mt}}); err == nil {
		t.Fatal("Reconfigure accepted a meter for an unregistered backend")
	}
	if err := a.Reconfigure(Routes{Backends: tiny}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Serve(ctx, promptReq(p, wire.F3, 1e6), []byte(p))
	if !errors.Is(err, ErrNoRoute) || events[len(events)-1].Reason != "no_route" {
		t.Fatalf("after dropping big, an F3 serve: %v, event %+v", err, events[len(events)-1])
	}
	if got := a.Backends(); len(got) != 1 || got[0].Backend.Name() != "tiny" || got[0].Learned {
		t.Fatalf("Backends after reconfigure: %+v", got)
	}
}

// A serve whose caller is gone when the engine finishes seals nothing.
func TestCallerGoneSealsNothing(t *testing.T) {
	sealer := newMemSealer(t)
	ctx, cancel := context.WithCancel(context.Background())
	b := &cancelling{Backend: refs(t, engine.ReferenceConfig{Name: "tiny", Fidelity: wire.F1, UJPerToken: 10})[0], cancel: cancel}
	var ev Event
	a, err := New(Config{Backends: []engine.Backend{b}, Steward: sealer, Observe: func(e Event) { ev = e }})
	if err != nil {
		t.Fatal(err)
	}
	p := "one two"
	_, err = a.Serve(ctx, promptReq(p, wire.F1, 1e6), []byte(p))
	if err == nil || !strings.Contains(err.Error(), "caller gone") || sealer.count() != 0 || ev.Reason != "cancelled" {
		t.Fatalf("serve with the caller gone: %v, %d sealed, event %+v", err, sealer.count(), ev)
	}
}

// cancelling completes its serve, then cancels the caller's context, as a
// client that hangs up just as the answer is ready.
type cancelling struct {
	engine.Backend
	cancel func()
}

func (c *cancelling) Serve(ctx context.Context, r wire.ServeRequest, p []byte) (engine.Result, error) {
	res, err := c.Backend.Serve(context.WithoutCancel(ctx), r, p)
	c.cancel()
	return res, err
}

// Streaming and chat reach an engine that supports them; a plain backend
// streams its whole output at once and refuses chat.
func TestEngineOptions(t *testing.T) {
	sealer := newMemSealer(t)
	plain := &countingBackend{Backend: refs(t, engine.ReferenceConfig{Name: "plain", Fidelity: wire.F1, UJPerToken: 10})[0]}
	a, err := New(Config{Backends: []engine.Backend{plain}, Steward: sealer})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := "stream me"
	var pieces []string
	resp, err := a.ServeWith(ctx, promptReq(p, wire.F1, 1e6), []byte(p), Options{Engine: engine.Options{Emit: func(b []byte) error {
		pieces = append(pieces, string(b))
		return nil
	}}})
	if err != nil || len(pieces) != 1 || pieces[0] != string(resp.Output) {
		t.Fatalf("plain backend streaming: %v, pieces %q", err, pieces)
	}
	_, err = a.ServeWith(ctx, promptReq(p, wire.F1, 1e6), []byte(p), Options{Engine: engine.Options{Chat: true}})
	if !errors.Is(err, engine.ErrNoChat) || sealer.count() != 1 {
		t.Fatalf("chat on a plain backend: %v (%d sealed)", err, sealer.count())
	}
	// An Emit that fails (the client went away) seals nothing.
	_, err = a.ServeWith(ctx, promptReq(p, wire.F1, 1e6), []byte(p), Options{Engine: engine.Options{Emit: func([]byte) error { return errors.New("client gone") }}})
	if err == nil || sealer.count() != 1 {
		t.Fatalf("failed emit: %v (%d sealed)", err, sealer.count())
	}
}

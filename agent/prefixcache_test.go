//go:build linux

// Linux only: the engine's work is read from /proc/PID/task/*/schedstat.

package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/internal/testbin"
	"meshd/shunt"
	"meshd/shunt/shunttest"
	"meshd/steward"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// cpuNs is the CPU time process pid has run, summed over its threads, in
// nanoseconds (the first field of each thread's schedstat).
func cpuNs(t *testing.T, pid int) time.Duration {
	t.Helper()
	tasks, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "schedstat"))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no schedstat for pid %d: %v", pid, err)
	}
	var sum int64
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // a thread that ended between the glob and the read
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			t.Fatalf("%s: empty", p)
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		sum += n
	}
	return time.Duration(sum)
}

// workMeter opens its window when the serve starts and, before it
// closes, runs the simulated clock for as long as the engine process
// computed in between (its CPU time): the simulated chip sees the load
// exactly while the engine works, so the energy the meter integrates is
// the engine's real work, whatever the counters say.
type workMeter struct {
	Meter
	t     *testing.T
	clock *drivertest.Clock
	pid   func() int
	// armed holds, just before a window closes, a channel the meter's
	// clock closes when the window's Close reads it: that read is the
	// window taking its end, so the clock is driven on only after the end
	// is fixed. A fresh channel per window: a window whose
	// wait ended on the wall clock before the drive saw its end leaves
	// nothing behind for the next one.
	armed *atomic.Pointer[chan struct{}]
	work  *[]time.Duration // the engine's CPU time in each window
}

func (w workMeter) Open(ctx context.Context) (Window, error) {
	cpu0 := cpuNs(w.t, w.pid())
	win, err := w.Meter.Open(ctx)
	if err != nil {
		return nil, err
	}
	return workWindow{win, w, cpu0}, nil
}

// runExactly runs the simulated clock on to until and not past it, in
// steps of at most a millisecond, letting the sampler take each reading
// that falls due: unlike runTo, which jumps to the next sleeper's
// deadline, it cannot overshoot when that deadline lies beyond until
// (a sampler that backed off under load), so the window holds the
// engine's work and no more.
func runExactly(t *testing.T, clock *drivertest.Clock, until time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // reports a hang only
	defer cancel()
	for {
		if err := clock.WaitSleepers(ctx, 1); err != nil {
			t.Fatalf("the sampler stopped sleeping: %v", err)
		}
		left := until.Sub(clock.Now())
		if left <= 0 {
			return
		}
		clock.Advance(min(left, time.Millisecond))
	}
}

// closingWindow reports whether the caller is a window's Close (the
// span's, which the agent's meter is, or a bare shunt window's): the read
// that takes the window's end.
func closingWindow() bool {
	var pcs [16]uintptr
	frames := runtime.CallersFrames(pcs[:runtime.Callers(3, pcs[:])])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, "shunt.(*SpanWindow).Close") || strings.HasSuffix(f.Function, "shunt.(*Window).CloseReport") {
			return true
		}
		if !more {
			return false
		}
	}
}

type workWindow struct {
	Window
	w    workMeter
	cpu0 time.Duration
}

func (ww workWindow) Close(ctx context.Context) (wire.Reading, error) {
	w := ww.w
	d := cpuNs(w.t, w.pid()) - ww.cpu0
	*w.work = append(*w.work, d)
	runExactly(w.t, w.clock, w.clock.Now().Add(d))
	tookEnd := make(chan struct{})
	w.armed.Store(&tookEnd)
	defer w.armed.Store(nil)
	first := true
	return shunttest.CloseDriving(ctx, ww.Window.Close, func(closed <-chan struct{}) error {
		if first {
			first = false
			select {
			case <-tookEnd:
			case <-closed:
				return nil
			}
		}
		if err := w.clock.WaitSleepers(ctx, 1); err != nil {
			return err
		}
		w.clock.AdvanceToNext()
		return nil
	})
}

// TestRepeatedPromptCostsLessUnderTheMeter is mesh/1 §5's prefix cache
// end to end, PROFILE §12: the built-in engine (a real mesh-gguf child)
// serves a long prompt twice behind the agent, metered by a register-level
// INA226 on an 18 W load. The second receipt carries the reused prompt
// tokens as cache_hit_tokens, the same output, and less energy per
// accepted token, because the serve it measured was shorter.
func TestRepeatedPromptCostsLessUnderTheMeter(t *testing.T) {
	runner := testbin.Build(t, "meshd/cmd/mesh-gguf")
	dir := t.TempDir()
	model := filepath.Join(dir, "m.gguf")
	f, err := os.Create(model)
	if err != nil {
		t.Fatal(err)
	}
	shape := gguf.Shape{Layers: 4, Dim: 256, Heads: 4, KVHeads: 2, FF: 768, Vocab: 320, Ctx: 512, Type: gguf.F32}
	if err := gguf.Synth(f, shape, 3); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := subprocess.New(ctx, subprocess.Config{
		Name: "gguf", Runner: runner, Model: model, ContextSize: 512, Threads: 1,
		Fidelity: wire.F1, UJPerToken: 50,
		HealthTimeout: 60 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Stop(context.Background()) })
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}

	clock := drivertest.NewClock(drivertest.Epoch, false)
	bus := inasim.NewBus("sim-1", clock)
	chip := bus.Add(inasim.INA226, 0x40)
	const watts = 18.0 // 1.5 A through 10 mΩ on a 12 V rail
	chip.SetShunt(10 * physic.MilliOhm)
	chip.SetLoad(inasim.Constant(1500*physic.MilliAmpere, 12*physic.Volt))
	dev, err := ina226.Open(bus, 0x40, ina226.Config{ShuntMicroOhms: 10_000, MaxCurrentUA: 2_000_000, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Pointer[chan struct{}]
	now := func() time.Time {
		// The time is read before the signal: once it is sent the drive
		// moves the clock, and a closing goroutine descheduled between
		// the two would otherwise take its end periods late (a CI run
		// under load saw the repeated serve's window hold eleven sampler
		// periods the engine never worked). Only the window's own read
		// counts: the sampler reading the clock is not the end taken.
		t := clock.Now()
		if ch := armed.Load(); ch != nil && closingWindow() && armed.CompareAndSwap(ch, nil) {
			close(*ch)
		}
		return t
	}
	sm, err := shunt.New(ctx, dev, shunt.MeterConfig{Config: shunt.Config{Now: now}, After: func(time.Duration) <-chan time.Time { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer sm.Close()
	runTo(t, clock, clock.Now().Add(50*time.Millisecond))
	base, err := FromShunt(sm)
	if err != nil {
		t.Fatal(err)
	}
	var work []time.Duration
	meter := workMeter{Meter: base, t: t, clock: clock, pid: e.PID, armed: &armed, work: &work}
	a, _ := newAgent(t, meter, e)

	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 10)
	r := promptReq(prompt, wire.F0, 1e12)
	r.MaxTokens = 4
	first, err := a.Serve(ctx, r, []byte(prompt))
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.Serve(ctx, r, []byte(prompt))
	if err != nil {
		t.Fatal(err)
	}
	r1, r2 := first.Sealed.Receipt, second.Sealed.Receipt
	if !bytes.Equal(first.Output, second.Output) || r1.TokensOut != r2.TokensOut || r1.TokensAccepted == 0 || r1.TokensAccepted != r2.TokensAccepted {
		t.Fatalf("outputs %q (%d accepted) then %q (%d accepted): the cache changed the answer", first.Output, r1.TokensAccepted, second.Output, r2.TokensAccepted)
	}
	if r1.CacheHitTokens != 0 || r2.CacheHitTokens == 0 || r2.CacheHitTokens != r2.TokensIn-1 || r1.TokensIn != r2.TokensIn {
		t.Fatalf("cache_hit_tokens %d then %d, tokens_in %d then %d: want 0, then all but the last prompt token",
			r1.CacheHitTokens, r2.CacheHitTokens, r1.TokensIn, r2.TokensIn)
	}
	var uj [2]uint64
	for i, rc := range []*steward.Receipt{r1, r2} {
		if rc.EnergyProvenance != "HwShunt" || rc.MeasuredUJ == nil || rc.UJPerAcceptedToken == nil {
			t.Fatalf("serve %d: provenance %s, measured %v: want a HwShunt measurement", i+1, rc.EnergyProvenance, rc.MeasuredUJ)
		}
		en, err := rc.Energy()
		if err != nil {
			t.Fatal(err)
		}
		// The meter measured 18 W over its window, which holds the
		// engine's work.
		want := watts * float64(*rc.WindowNs) / 1e3
		if d := float64(en.UJ()) - want; d*d > float64(*rc.ErrorUJ+1)*float64(*rc.ErrorUJ+1) {
			t.Fatalf("serve %d: %d µJ over %d ns, 18 W gives %.0f (bound %d)", i+1, en.UJ(), *rc.WindowNs, want, *rc.ErrorUJ)
		}
		if *rc.WindowNs < uint64(work[i]) {
			t.Fatalf("serve %d: window %d ns shorter than the engine's %v of work", i+1, *rc.WindowNs, work[i])
		}
		t.Logf("serve %d: window %d ns, serve %d ns, period %d ns, %d µJ, %d accepted", i+1, *rc.WindowNs, *rc.ServeNs, *rc.PeriodNs, en.UJ(), rc.TokensAccepted)
		uj[i] = *rc.UJPerAcceptedToken
	}
	t.Logf("cold: %d prompt tokens, engine work %v, %d µJ/accepted token; repeated: %d reused, work %v, %d µJ/accepted token",
		r1.TokensIn, work[0], uj[0], r2.CacheHitTokens, work[1], uj[1])
	if uj[1] >= uj[0] {
		t.Fatalf("repeated prompt: %d µJ per accepted token, cold %d: the reused prefix saved nothing", uj[1], uj[0])
	}
}

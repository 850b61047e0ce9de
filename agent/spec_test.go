//go:build unix

package agent

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"
	"meshd/engine"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/shunt"
	"meshd/wire"

	"periph.io/x/conn/v3/physic"
)

// TestSpeculativeServeReceipt serves through the built-in runner with a
// draft model (a truncated copy of the target) under a simulated INA226,
// and checks what the receipt seals: the runner's draft counters as
// spec_proposed and spec_accepted, tokens_accepted the accepted
// proposals, fewer than the tokens delivered and than those proposed,
// and the wedge metric the measured energy over the accepted tokens (so
// larger than the energy per delivered token).
func TestSpeculativeServeReceipt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs mesh-gguf")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "mesh-gguf")
	if out, err := exec.Command("go", "build", "-o", bin, "meshd/cmd/mesh-gguf").CombinedOutput(); err != nil {
		t.Fatalf("go build mesh-gguf: %v\n%s", err, out)
	}
	var target bytes.Buffer
	shape := gguf.Shape{Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.Q8_0, SeparateOutput: true}
	if err := gguf.Synth(&target, shape, 23); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(target.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var draft bytes.Buffer
	if err := gguf.WriteTruncated(&draft, f, 3); err != nil {
		t.Fatal(err)
	}
	model, draftPath := filepath.Join(dir, "target.gguf"), filepath.Join(dir, "draft.gguf")
	if err := os.WriteFile(model, target.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(draftPath, draft.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := subprocess.New(ctx, subprocess.Config{Name: "spec", Runner: bin, Model: model, DraftModel: draftPath,
		DraftMax: 4, ExtraArgs: []string{"--draft-p-min", "0"}, ContextSize: 256, Threads: 1,
		Fidelity: wire.F1, UJPerToken: 50, HealthTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(context.Background())

	clock := drivertest.NewClock(drivertest.Epoch, false)
	bus := inasim.NewBus("sim-spec", clock)
	chip := bus.Add(inasim.INA226, 0x40)
	chip.SetShunt(10 * physic.MilliOhm)
	chip.SetLoad(inasim.Constant(1500*physic.MilliAmpere, 12*physic.Volt)) // 18 W
	dev, err := ina226.Open(bus, 0x40, ina226.Config{ShuntMicroOhms: 10_000, MaxCurrentUA: 2_000_000, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	m, err := shunt.New(ctx, dev, shunt.MeterConfig{Config: shunt.Config{Now: clock.Now}, After: func(time.Duration) <-chan time.Time { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	runTo(t, clock, clock.Now().Add(50*time.Millisecond))
	meter, err := FromShunt(m)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newAgent(t, closeHook{meter, func() { runTo(t, clock, clock.Now().Add(100*time.Millisecond)) }, clock}, engine.Backend(e))
	p := "the quick brown fox"
	r := promptReq(p, wire.F0, 1e9)
	r.MaxTokens = 40
	resp, err := a.Serve(ctx, r, []byte(p))
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	if rc.EnergyProvenance != "HwShunt" {
		t.Fatalf("provenance %s", rc.EnergyProvenance)
	}
	if rc.SpecProposed == 0 || rc.TokensAccepted != rc.SpecAccepted || rc.TokensAccepted == 0 ||
		rc.TokensAccepted >= rc.TokensOut || rc.TokensAccepted >= rc.SpecProposed {
		t.Fatalf("receipt: tokens_out %d, tokens_accepted %d, spec %d/%d: want 0 < accepted = spec_accepted < tokens_out, < spec_proposed",
			rc.TokensOut, rc.TokensAccepted, rc.SpecAccepted, rc.SpecProposed)
	}
	en, err := rc.Energy()
	if err != nil {
		t.Fatal(err)
	}
	if want := en.UJ() / uint64(rc.TokensAccepted); rc.UJPerAcceptedToken == nil || *rc.UJPerAcceptedToken != want ||
		*rc.UJPerAcceptedToken <= en.UJ()/uint64(rc.TokensOut) {
		t.Fatalf("wedge %v, want %d µJ / %d accepted = %d (above %d per delivered token)",
			rc.UJPerAcceptedToken, en.UJ(), rc.TokensAccepted, want, en.UJ()/uint64(rc.TokensOut))
	}
	t.Logf("sealed: %d µJ, %d tokens out, %d proposed, %d accepted, %d µJ per accepted token",
		en.UJ(), rc.TokensOut, rc.SpecProposed, rc.TokensAccepted, *rc.UJPerAcceptedToken)
}

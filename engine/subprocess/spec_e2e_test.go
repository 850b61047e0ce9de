//go:build unix

package subprocess

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/wire"
)

// synthPair writes a target model and a draft that is its first
// draftLayers blocks (the same vocabulary, embeddings and output head),
// and returns their paths.
func synthPair(t *testing.T, dir string, shape gguf.Shape, seed uint64, draftLayers int) (target, draft string) {
	t.Helper()
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, shape, seed); err != nil {
		t.Fatal(err)
	}
	target = filepath.Join(dir, "target.gguf")
	if err := os.WriteFile(target, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var d bytes.Buffer
	if err := gguf.WriteTruncated(&d, f, draftLayers); err != nil {
		t.Fatal(err)
	}
	draft = filepath.Join(dir, "draft.gguf")
	if err := os.WriteFile(draft, d.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return target, draft
}

// TestEndToEndMeshGGUFSpeculative serves greedily through the built-in
// runner with a draft model: the output is the one the runner gives
// without the draft, plain and streamed; the recipe names the draft; the
// outcome carries the runner's draft counters, and tokens_accepted is the
// accepted proposals, fewer than the tokens delivered and than those
// proposed. A draft of another vocabulary fails the start by name.
func TestEndToEndMeshGGUFSpeculative(t *testing.T) {
	bin := meshGGUF(t)
	noLeaks(t)
	dir := t.TempDir()
	shape := gguf.Shape{Layers: 4, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.Q8_0, SeparateOutput: true}
	model, draft := synthPair(t, dir, shape, 23, 3)
	base := Config{
		Runner: bin, Model: model, ContextSize: 256, Threads: 1,
		Fidelity: wire.F0, UJPerToken: 50,
		HealthTimeout: 30 * time.Second, HealthInterval: 20 * time.Millisecond,
		StopGrace: 5 * time.Second, RestartBackoff: 50 * time.Millisecond, MaxRestartBackoff: time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, p := request("the quick brown fox", 40)
	plainEng := startEngine(t, base)
	plain, err := plainEng.Serve(ctx, req, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := plainEng.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	spec := base
	// The synthetic draft is rarely sure of its tokens: draft every one.
	spec.DraftModel, spec.DraftMax, spec.DraftMin, spec.ExtraArgs = draft, 4, 1, []string{"--draft-p-min", "0"}
	e := startEngine(t, spec)
	if want := "gguf:" + mustCID(t, model) + "+draft:" + mustCID(t, draft); e.Recipe() != want {
		t.Fatalf("recipe %q, want %q", e.Recipe(), want)
	}
	var first wire.ServeOutcome
	for _, stream := range []bool{false, true} {
		var pieces [][]byte
		opts := collect(&pieces, 0, nil)
		if !stream {
			opts.Emit = nil
		}
		got, err := e.ServeWith(ctx, req, p, opts)
		if err != nil {
			t.Fatal(err)
		}
		o := got.Outcome
		if !bytes.Equal(got.Output, plain.Output) || o.TokensOut != plain.Outcome.TokensOut || o.TokensIn != plain.Outcome.TokensIn {
			t.Fatalf("stream %v: speculative %q (%d tokens), plain %q (%d)", stream, got.Output, o.TokensOut, plain.Output, plain.Outcome.TokensOut)
		}
		if stream && !bytes.Equal(bytes.Join(pieces, nil), got.Output) {
			t.Fatalf("streamed pieces %q, output %q", pieces, got.Output)
		}
		if o.SpecProposed == 0 || o.TokensAccepted != o.SpecAccepted || o.TokensAccepted >= o.TokensOut || o.TokensAccepted >= o.SpecProposed {
			t.Fatalf("stream %v: outcome %+v: want proposals, accepted = spec_accepted < tokens_out and < spec_proposed", stream, o)
		}
		// The second serve of the same prompt may reuse the first's
		// cache: all else must agree.
		same := o
		same.CacheHitTokens = first.CacheHitTokens
		if stream && same != first {
			t.Fatalf("streamed outcome %+v, plain %+v", o, first)
		}
		first = o
		t.Logf("stream %v: %d tokens out, %d proposed, %d accepted", stream, o.TokensOut, o.SpecProposed, o.TokensAccepted)
	}

	// A draft whose vocabulary differs is refused by the runner at load.
	other := gguf.Shape{Layers: 1, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 330, Ctx: 256, Type: gguf.Q8_0}
	odd := filepath.Join(dir, "odd.gguf")
	fh, err := os.Create(odd)
	if err != nil {
		t.Fatal(err)
	}
	if err := gguf.Synth(fh, other, 3); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	bad := base
	bad.DraftModel = odd
	be, err := New(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	err = be.Start(ctx)
	if err == nil {
		be.Stop(ctx)
		t.Fatal("a draft of another vocabulary started")
	}
	if !strings.Contains(err.Error(), "must share the target's vocabulary") {
		t.Fatalf("start with a draft of another vocabulary: %v", err)
	}
}

package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/agent/config"
	"meshd/wire"
)

func parse(t *testing.T, dir, extra string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf("[steward]\nstate_dir = %q\n%s", dir, extra)), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const two = `
[[backend]]
name = "a"
kind = "reference"
fidelity = 1
uj_per_token = 10

[[backend]]
name = "b"
kind = "reference"
fidelity = 2
uj_per_token = 20
`

// A new node creates its steward key (0600) and an empty chain; a second
// open of the same state continues it.
func TestOpenCreatesKeyAndContinues(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := Open(ctx, parse(t, dir, two), Options{})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "steward.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("steward key: %v %v", err, fi)
	}
	id := n.Key.ID()
	p := []byte("hello there")
	req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 2, JouleCeilingUJ: 1e6}
	resp, err := n.Agent.Serve(ctx, req, p)
	if err != nil || resp.Sealed.Receipt.Backend != "b" {
		t.Fatalf("serve: %v %+v", err, resp)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err = Open(ctx, parse(t, dir, two), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	if n.Key.ID() != id || n.Stores.Log.Durable() != 1 {
		t.Fatalf("reopened: steward %s (was %s), %d receipts", n.Key.ID(), id, n.Stores.Log.Durable())
	}
}

// Reload keeps an unchanged backend's engine, replaces a changed one,
// drops a removed one, and refuses a bad table keeping the old.
func TestReloadReplacesOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	n, err := Open(ctx, parse(t, dir, two), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	before := n.Backends()
	changed := strings.Replace(two, "uj_per_token = 20", "uj_per_token = 25", 1) + "\n[[backend]]\nname = \"c\"\nkind = \"reference\"\nfidelity = 4\nuj_per_token = 40\n"
	if err := n.Reload(ctx, parse(t, dir, changed)); err != nil {
		t.Fatal(err)
	}
	after := n.Backends()
	if len(after) != 3 || after[0].Engine != before[0].Engine || after[1].Engine == before[1].Engine || after[1].Engine.UJPerToken() != 25 {
		t.Fatalf("after reload: %d backends; a kept %v; b replaced %v (%d µJ/token)", len(after),
			after[0].Engine == before[0].Engine, after[1].Engine != before[1].Engine, after[1].Engine.UJPerToken())
	}
	if got := n.Agent.Backends(); len(got) != 3 || got[2].Backend.Name() != "c" {
		t.Fatalf("the agent routes over %d backends", len(got))
	}
}

// Backends whose spans overlap without being equal would each be charged
// the shared meter's whole energy: refused at open.
func TestOverlappingSpansRefused(t *testing.T) {
	cfg := parse(t, t.TempDir(), `
[[meter]]
name = "x"
driver = "rapl"
zone = "package-0"

[[meter]]
name = "y"
driver = "rapl"
zone = "package-0/dram"
disjoint = ["x"]

[[backend]]
name = "a"
kind = "reference"
fidelity = 1
uj_per_token = 10
meters = ["x", "y"]

[[backend]]
name = "b"
kind = "reference"
fidelity = 2
uj_per_token = 20
meters = ["x"]
`)
	err := checkSpans(cfg)
	if err == nil || !strings.Contains(err.Error(), `meter "x" is also in the span x+y`) {
		t.Fatalf("overlapping spans: %v", err)
	}
}

// A config built without the checker (a program's own, the demo's) is
// held to the same rule at open: meters a span sums must be declared
// disjoint, and one declared inside another member is its breakdown.
func TestNestedSpanRefusedAtOpen(t *testing.T) {
	cfg := &config.Config{
		Meters: []config.Meter{{Name: "board", Driver: "ina226"}, {Name: "cpu", Driver: "rapl", Zone: "package-0"}},
		Backends: []config.Backend{{Name: "a", Kind: "reference", Fidelity: 1, UJPerToken: 10, Work: 1,
			Meters: []string{"board", "cpu"}}},
	}
	if err := checkSpans(cfg); err == nil || !strings.Contains(err.Error(), `backend "a": meters "board" and "cpu" may measure the same energy`) {
		t.Fatalf("undeclared nesting: %v", err)
	}
	cfg.Meters[1].Inside = "board"
	if err := checkSpans(cfg); err != nil {
		t.Fatalf("declared inside: %v", err)
	}
	cfg.Meters[1].Inside, cfg.Meters[1].Disjoint = "", []string{"board"}
	if err := checkSpans(cfg); err != nil {
		t.Fatalf("declared disjoint: %v", err)
	}
}

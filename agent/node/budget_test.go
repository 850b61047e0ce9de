package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/steward"
	"meshd/wire"
)

func logDirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

// A node with a tiny disk budget serves well past it: after each serve's
// pass the receipt log is under its limit, the node reopens from its
// checkpoint with the older segments archived (the grant ledger's anchor
// keeps the one it needs), and archive plus live log verify from genesis.
func TestNodeDiskBudget(t *testing.T) {
	dir := t.TempDir()
	arch := filepath.Join(t.TempDir(), "archive")
	const limit = 64 << 10
	cfg := parse(t, dir, "checkpoint_every = 8\nsegment_bytes = 8192\nmax_log_bytes = 65536\narchive_dir = \""+arch+"\"\n"+two)
	ctx := context.Background()
	serve := func(n *Node, i int) {
		t.Helper()
		p := []byte{byte(i), byte(i >> 8), 'x'}
		req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 1, JouleCeilingUJ: 1e6}
		if _, err := n.Agent.Serve(ctx, req, p); err != nil {
			t.Fatalf("serve %d: %v", i, err)
		}
		n.budgetPass()
		if got := logDirBytes(t, cfg.ReceiptsDir()); got > limit {
			t.Fatalf("after serve %d the log holds %d bytes, over %d", i, got, limit)
		}
	}
	n, err := Open(ctx, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const total = 400
	for i := 0; i < total; i++ {
		serve(n, i)
	}
	if err := n.Storage(); err != nil {
		t.Fatalf("storage refused with an archive directory: %v", err)
	}
	st := n.Budget().Stats()
	if len(st.Archived) == 0 || st.Limit != limit {
		t.Fatalf("budget stats %+v", st)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	n, err = Open(ctx, cfg, Options{})
	if err != nil {
		t.Fatalf("reopen with archived segments: %v", err)
	}
	serve(n, total)
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := steward.VerifyArchive(ctx, cfg.ReceiptsDir(), arch, steward.VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := os.ReadDir(arch)
	if rep.Records != total+1 || rep.Verified != total+1 {
		t.Fatalf("archive+live: %d records, %d verified; want %d", rep.Records, rep.Verified, total+1)
	}
	t.Logf("%d serves: %d archived segments, live log %d bytes (limit %d)", total+1, len(segs), logDirBytes(t, cfg.ReceiptsDir()), limit)
}

// With only a fleet to acknowledge receipts and none acknowledged (the
// server is unreachable), the node fills its budget and then refuses
// seals with steward.ErrStorage, naming the stream; every receipt stays.
func TestNodeDiskBudgetRefusesUnacknowledged(t *testing.T) {
	dir := t.TempDir()
	cfg := parse(t, dir, "checkpoint_every = 8\nsegment_bytes = 8192\nmax_log_bytes = 65536\n[fleet]\nurl = \"nats://127.0.0.1:1\"\n"+two)
	ctx := context.Background()
	n, err := Open(ctx, cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(ctx)
	var refused error
	served := 0
	for i := 0; i < 1000 && refused == nil; i++ {
		p := []byte{byte(i), byte(i >> 8), 'y'}
		req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 1, JouleCeilingUJ: 1e6}
		if _, refused = n.Agent.Serve(ctx, req, p); refused == nil {
			served++
		}
		n.budgetPass()
	}
	if !errors.Is(refused, steward.ErrStorage) || !errors.Is(n.Storage(), steward.ErrStorage) || !strings.Contains(refused.Error(), "the first receipt the fleet stream has not acknowledged") {
		t.Fatalf("after %d serves: refusal %v, storage %v", served, refused, n.Storage())
	}
	if got := logDirBytes(t, cfg.ReceiptsDir()); got > 65536 {
		t.Fatalf("log at %d bytes", got)
	}
	if m := n.Budget().Manifest(); len(m) != 0 || n.Stores.Log.Durable() != uint64(served) {
		t.Fatalf("receipts gone without acknowledgement: manifest %+v, %d durable of %d", m, n.Stores.Log.Durable(), served)
	}
}

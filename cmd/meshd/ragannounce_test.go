package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"meshd/agent/api/client"
	"meshd/engine/runner/gguf"
)

// A node that started with [fleet] url and no corpus announces nothing;
// once a reload brings a corpus it announces it, so discovery finds it
// without a restart.
func TestCorpusAddedOnReloadIsAnnounced(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready within 10s")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	runner := meshGGUFBin(t)
	model := filepath.Join(t.TempDir(), "embed.gguf")
	f, _ := os.Create(model)
	if err := gguf.SynthBERT(f, gguf.BERTShape{Layers: 2, Dim: 64, Heads: 4, FF: 128, Vocab: 400, Ctx: 128, Type: gguf.F32, Pooling: 1}, 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	a, b := newTestRepo(t), newTestRepo(t)
	a1 := a.commit(map[string]string{"shunt.md": "the shunt turns current\ninto a voltage\n"})
	b1 := b.commit(map[string]string{"receipt.md": "each receipt\nis signed\n"})

	fleet := fmt.Sprintf("[fleet]\nurl = %q\n", ns.ClientURL())
	reloaded := make(chan struct{}, 1)
	td := startDaemon(t, fleet+refBackends, serveHooks{reloaded: func() { reloaded <- struct{}{} }})
	if td.d.rag != nil {
		t.Fatal("a node without corpora announced")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quick, qcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	found, err := client.Discover(quick, nc, client.ForCorpus("example/docs"), 1)
	qcancel()
	if len(found) != 0 {
		t.Fatalf("found before any corpus: %+v (%v)", found, err)
	}

	cfg, err := os.ReadFile(filepath.Join(td.dir, "meshd.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(td.dir, "meshd.toml"), append(cfg, ragConfig(model, runner, a, a1, b, b1)...), 0o600); err != nil {
		t.Fatal(err)
	}
	hupAndWait(t, reloaded)
	found, err = client.Discover(ctx, nc, client.ForCorpus("example/docs"), 1)
	if err != nil || len(found) != 1 || !found[0].Steward.Equal(td.d.node.Key.Public()) {
		t.Fatalf("after the reload: %v %+v\n%s", err, found, td.logs.String())
	}
}

package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"meshd/agent/fleet"
	"meshd/steward"
	"meshd/steward/witness/swtpmtest"
	"meshd/wire"
)

// copyTree copies the state directory dir to dst, as a backup would.
func copyTree(t *testing.T, dir, dst string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// replaceTree puts the copy old in dir's place.
func replaceTree(t *testing.T, dir, old string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	copyTree(t, old, dir)
}

func serveN(t *testing.T, n *Node, count int) {
	t.Helper()
	for i := range count {
		p := []byte(strings.Repeat("y", i+1))
		req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 1, JouleCeilingUJ: 1e6}
		if _, err := n.Agent.Serve(context.Background(), req, p); err != nil {
			t.Fatal(err)
		}
	}
}

// A lone board with a TPM witness (swtpm here): the state directory
// replaced by an older copy (15 of 30 receipts) is refused at start, the
// error naming the counter, its value and the checkpoint's; the state as
// the node left it starts.
func TestNodeRefusesOlderStateTPM(t *testing.T) {
	ctx := context.Background()
	sock := swtpmtest.Start(t)
	dir := filepath.Join(t.TempDir(), "state")
	old := filepath.Join(t.TempDir(), "state-at-15")
	// parse opens [steward]: the witness keys go in that table.
	conf := func(t *testing.T) string {
		return fmt.Sprintf("witness = \"tpm\"\nwitness_device = %q\n%s", sock, two)
	}
	n, err := Open(ctx, parse(t, dir, conf(t)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	serveN(t, n, 15)
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	copyTree(t, dir, old)
	n, err = Open(ctx, parse(t, dir, conf(t)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	wr := n.Stores.Scan.Witness
	if wr == nil || !wr.Written || wr.Bound == nil || *wr.Bound != wr.Value {
		t.Fatalf("second start: witness report %+v, want the counter bound and matching", wr)
	}
	first := wr.Value
	serveN(t, n, 15)
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(t.TempDir(), "state-at-30")
	copyTree(t, dir, live)

	replaceTree(t, dir, old)
	_, err = Open(ctx, parse(t, dir, conf(t)), Options{})
	if !errors.Is(err, steward.ErrRolledBack) {
		t.Fatalf("start on the older copy: %v, want ErrRolledBack", err)
	}
	for _, want := range []string{
		"TPM NV counter 0x01004d53 on " + sock,
		fmt.Sprintf("reads %d", first+1),
		"(15 receipts, sealed at unix ms",
		fmt.Sprintf("is bound to %d", first),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nlacks %q", err, want)
		}
	}
	t.Logf("refused: %v", err)

	replaceTree(t, dir, live)
	n, err = Open(ctx, parse(t, dir, conf(t)), Options{})
	if err != nil {
		t.Fatalf("start on the state the node left: %v", err)
	}
	defer n.Close(ctx)
	if got := n.Stores.Log.Durable(); got != 30 {
		t.Fatalf("%d receipts, want 30", got)
	}
}

// With a fleet, the stream is the witness: a state directory older than
// what the stream acknowledged is refused at start.
func TestNodeRefusesOlderStateFleet(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer srv.Shutdown()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	old := filepath.Join(t.TempDir(), "state-at-1")
	conf := two + "\n[fleet]\nurl = \"" + srv.ClientURL() + "\"\n"
	open := func() *Node {
		t.Helper()
		n, err := Open(ctx, parse(t, dir, conf), Options{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	published := func(n *Node, want uint64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for n.Publisher().Status().Next < want {
			if time.Now().After(deadline) {
				t.Fatalf("published %d of %d receipts", n.Publisher().Status().Next, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	n := open()
	serveN(t, n, 1)
	published(n, 1)
	n.Close(ctx)
	copyTree(t, dir, old)
	n = open()
	serveN(t, n, 2)
	published(n, 3)
	n.Close(ctx)

	replaceTree(t, dir, old)
	_, err = Open(ctx, parse(t, dir, conf), Options{})
	if !errors.Is(err, fleet.ErrRolledBack) || !strings.Contains(err.Error(), "holds receipt 2") || !strings.Contains(err.Error(), "the local log holds only 1 receipts") {
		t.Fatalf("start on the older copy: %v, want a refusal naming receipt 2 and the log's 1", err)
	}
	t.Logf("refused: %v", err)
}

package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/wire"
)

// A node with [fleet] publishes every sealed receipt to JetStream, each
// under its steward's subject with its content id as the message id.
func TestNodePublishesReceipts(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer srv.Shutdown()
	dir := t.TempDir()
	n, err := Open(context.Background(), parse(t, dir, two+"\n[fleet]\nurl = \""+srv.ClientURL()+"\"\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	var ids []string
	for i := range 3 {
		p := []byte(strings.Repeat("x", i+1))
		req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 3, MaxTokens: 2, FidelityFloor: 1, JouleCeilingUJ: 1e6}
		resp, err := n.Agent.Serve(context.Background(), req, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, resp.Sealed.ID.String())
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := "mesh.receipts." + n.Key.ID()
	var got []string
	for len(got) < 3 {
		st, err := js.Stream(ctx, "MESH_RECEIPTS")
		if err == nil {
			got = got[:0]
			for seq := uint64(1); ; seq++ {
				m, err := st.GetMsg(ctx, seq)
				if err != nil {
					break
				}
				if m.Subject == subject {
					got = append(got, m.Header.Get("Nats-Msg-Id"))
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("published %d of 3 receipts: %v", len(got), got)
		}
		if len(got) < 3 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("message %d has id %s, the receipt is %s", i, got[i], ids[i])
		}
	}
}

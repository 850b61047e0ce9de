package fleet

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
	"meshd/wire"
)

// draft is a minimal valid serve to seal, as steward's own tests build it.
func draft(i int) steward.Draft {
	return steward.Draft{
		Request:  wire.ContentOf(fmt.Appendf(nil, "request %d", i)),
		Backend:  "ref-mid",
		Recipe:   "reference/v1:work=64",
		Route:    "ref-mid: cheapest of 1 admissible",
		Outcome:  wire.ServeOutcome{TokensIn: 5, TokensOut: 10, TokensAccepted: 10},
		Floor:    wire.F1,
		Served:   wire.F2,
		Energy:   wire.Estimated(uint64(4500 + i)),
		Metering: wire.Metering{Meter: steward.EstimatorMeter, Kind: wire.KindEstimator, WindowNs: 1000, ServeNs: 1000},
	}
}

func newKey(t testing.TB) *steward.Key {
	t.Helper()
	k, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signChain signs n linked receipts by k from sequence 0 without a log:
// the raw material for crafted messages (forks, gaps, replays).
func signChain(t testing.TB, k *steward.Key, n int) [][]byte {
	t.Helper()
	st := steward.New(k, nil, steward.Options{})
	now := time.UnixMilli(1_767_225_600_000)
	out := make([][]byte, 0, n)
	var prev *wire.ContentID
	for i := range n {
		nonce := make([]byte, steward.NonceSize)
		rand.Read(nonce)
		r, err := st.Build(draft(i), uint64(i), prev, nonce, now)
		if err != nil {
			t.Fatal(err)
		}
		core, err := r.EncodeCore()
		if err != nil {
			t.Fatal(err)
		}
		env, err := steward.Sign1(k, core)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
		id := wire.ContentOf(env)
		prev = &id
	}
	return out
}

// node is one board: a steward key and its receipt log.
type node struct {
	key *steward.Key
	dir string
	log *steward.Log
	st  *steward.Steward
}

func newNode(t testing.TB, opt steward.LogOptions) *node {
	t.Helper()
	n := &node{key: newKey(t), dir: filepath.Join(t.TempDir(), "receipts")}
	n.open(t, opt)
	return n
}

func (n *node) open(t testing.TB, opt steward.LogOptions) {
	t.Helper()
	opt.Key = n.key
	l, _, err := steward.OpenLog(context.Background(), n.dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	n.log, n.st = l, steward.New(n.key, l, steward.Options{})
	t.Cleanup(func() { l.Close() })
}

func (n *node) id() string { return n.key.ID() }

// seal seals count receipts and returns their envelopes.
func (n *node) seal(t testing.TB, count int) [][]byte {
	t.Helper()
	var out [][]byte
	for range count {
		s, err := n.st.Seal(context.Background(), draft(int(n.log.Next())))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s.Envelope)
	}
	return out
}

// startServer runs a JetStream server with file storage in dir on port
// (-1: any free port).
func startServer(t testing.TB, dir string, port int, opts ...func(*server.Options)) *server.Server {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	for _, f := range opts {
		f(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready within 10s")
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}

// msg is a receipt message as the publisher sends it.
func msg(steward string, seq uint64, env []byte) Message {
	m := ReceiptMsg(steward, seq, env)
	return Message{Subject: m.Subject, Header: m.Header, Data: env}
}

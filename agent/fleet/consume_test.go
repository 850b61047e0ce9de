package fleet

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A pull request that expires under load leaves the messages the server
// sent it delivered to no one. Acknowledging a later message (AckAll)
// would skip them for good and the verifier would report gaps that are not
// in the stream; instead the hole in the delivery sequence is noticed,
// nothing past it is acknowledged, and the consumer is repositioned after
// the last message verified.
func TestConsumeRecoversDeliveriesToAnExpiredFetch(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc, js := connect(t, srv.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := EnsureStream(ctx, js, StreamConfig("", 0)); err != nil {
		t.Fatal(err)
	}
	k := newKey(t)
	envs := signChain(t, k, 6)
	for i, env := range envs {
		if _, err := js.PublishMsg(ctx, ReceiptMsg(k.ID(), uint64(i), env)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := ConsumeConfig{Stream: DefaultStream, Durable: "hole", Fetch: DefaultFetch}
	cons, delivered, err := position(ctx, js, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A fetch that gives up after the server sent it 3 messages: they
	// were delivered, and nobody will ever see them.
	void, err := nc.SubscribeSync("void.inbox")
	if err != nil {
		t.Fatal(err)
	}
	defer void.Unsubscribe()
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+DefaultStream+".hole", "void.inbox", []byte(`{"batch":3,"no_wait":true}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the server to deliver into the void", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Consumer == 3
	})
	v := NewVerifier(VerifierConfig{})
	n, _, err := consumeBatch(ctx, cons, v, cfg, &delivered)
	if !errors.Is(err, errDeliveryHole) || n != 0 || v.Position() != 0 {
		t.Fatalf("batch after the lost deliveries: %d fed, position %d, err %v; want none fed and the hole named", n, v.Position(), err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 0 {
		t.Fatalf("acknowledged up to stream message %d past the hole", info.AckFloor.Stream)
	}
	// A run repositions the consumer and verifies every receipt.
	if err := Consume(ctx, js, v, cfg); err != nil {
		t.Fatal(err)
	}
	r := v.Report()
	if s, ok := r.Steward(k.ID()); !ok || !r.OK() || s.Count != 6 {
		t.Fatalf("after the reposition: %+v, problems %v", s, r.Kinds())
	}
}

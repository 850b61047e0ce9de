package fleet

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	benchBoards = flag.Int("fleet.boards", 1000, "BenchmarkFleet: boards simulated")
	benchChain  = flag.Int("fleet.chain", 30, "BenchmarkFleet: receipts per board (at 10/s, chain/10 seconds of fleet traffic)")
	benchRate   = flag.Float64("fleet.rate", 10, "BenchmarkFleet: receipts per second per board in the paced run")
	benchConns  = flag.Int("fleet.conns", 8, "BenchmarkFleet: client connections the boards share")
)

// BenchmarkFleet simulates boards×rate receipts/s against one JetStream
// server with file storage on this machine, from envelopes sealed once
// beforehand: a paced run at the fleet's rate (does the server keep up?),
// an unpaced run (its ceiling), the verifier's rate consuming the stream,
// and the verifier's memory per steward. Run it with
//
//	go test ./agent/fleet -run '^$' -bench Fleet -benchtime 1x
//
// and -fleet.boards / -fleet.chain / -fleet.rate to size it.
func BenchmarkFleet(b *testing.B) {
	boards, chainLen := *benchBoards, *benchChain
	ids, chains := benchChains(b, boards, chainLen)
	total := boards * chainLen
	envBytes := 0
	for _, c := range chains {
		for _, e := range c {
			envBytes += len(e)
		}
	}
	say := func(format string, a ...any) { fmt.Fprintf(os.Stdout, "fleet: "+format+"\n", a...) }
	say("%d boards x %d receipts = %d envelopes, %.0f bytes each on average", boards, chainLen, total, float64(envBytes)/float64(total))

	// Memory first, before a server shares the heap and its caches come
	// and go: per steward as short histories leave it, and with the
	// duplicate window full (a steward that has run a while).
	short := benchMemory(b, ids, chains)
	say("verifier memory: %.0f bytes per steward after %d receipts each (%d stewards)", short, chainLen, boards)
	n := 20
	fullIDs, full := benchChains(b, n, DefaultWindow+16)
	steady := benchMemory(b, fullIDs, full)
	say("verifier memory: %.0f bytes per steward with its %d-id window full (%d stewards)", steady, DefaultWindow, n)
	b.ReportMetric(short, "B/steward")
	b.ReportMetric(steady, "B/steward-steady")

	srv := startServer(b, b.TempDir(), -1)
	ctx := context.Background()
	target := float64(boards) * *benchRate

	for b.Loop() {
		// Paced: every board publishes at the fleet rate, chain order.
		js, stream := benchStream(b, srv.ClientURL())
		cpu0 := cpuTime()
		paced, offered, lag := benchPublish(b, srv.ClientURL(), ids, chains, *benchRate)
		pubCPU := float64((cpuTime() - cpu0).Microseconds()) / float64(total)
		info, err := stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if info.State.Msgs != uint64(total) {
			b.Fatalf("stream holds %d messages, want %d", info.State.Msgs, total)
		}
		stored := float64(info.State.Bytes) / float64(info.State.Msgs)
		reached := "REACHED"
		if offered < 0.95*target || paced < 0.95*target || lag > time.Second {
			reached = "NOT reached"
		}
		say("paced publish: target %.0f msgs/s, %.0f offered, %.0f acknowledged, last ack %v after the last send: %.0f msgs/s sustained %s",
			target, offered, paced, lag.Round(time.Millisecond), target, reached)
		say("publish CPU (server and clients in this process): %.1f µs per message = %.0f msgs/s per core", pubCPU, 1e6/pubCPU)
		say("stored: %.0f bytes per message in the stream (envelope, subject, headers, index)", stored)

		// The verifier consuming what the paced run stored.
		v := NewVerifier(VerifierConfig{Trusted: ids})
		start, cpu0 := time.Now(), cpuTime()
		if err := Consume(ctx, js, v, ConsumeConfig{Durable: "bench", Fetch: 1000}); err != nil {
			b.Fatal(err)
		}
		consumed := float64(total) / time.Since(start).Seconds()
		consumeCPU := float64((cpuTime() - cpu0).Microseconds()) / float64(total)
		r := v.Report()
		if !r.OK() || len(r.Stewards) != boards {
			b.Fatalf("verifier: %d stewards, %d problems", len(r.Stewards), r.ProblemCount())
		}
		say("verify (durable pull consumer + verifier, %d cores): %.0f msgs/s; %.1f µs CPU per message = %.0f msgs/s per core",
			runtime.GOMAXPROCS(0), consumed, consumeCPU, 1e6/consumeCPU)

		// The verifier alone, fed from memory.
		msgs := make([]Message, 0, total)
		for seq := range chainLen {
			for i, id := range ids {
				msgs = append(msgs, msg(id, uint64(seq), chains[i][seq]))
			}
		}
		v = NewVerifier(VerifierConfig{Trusted: ids})
		start, cpu0 = time.Now(), cpuTime()
		for i := 0; i < len(msgs); i += 1000 {
			v.FeedBatch(msgs[i:min(i+1000, len(msgs))])
		}
		fed := float64(total) / time.Since(start).Seconds()
		fedCPU := float64((cpuTime() - cpu0).Microseconds()) / float64(total)
		say("verify (in memory, FeedBatch): %.0f msgs/s; %.1f µs CPU per message = %.0f msgs/s per core", fed, fedCPU, 1e6/fedCPU)

		// Unpaced, into a fresh stream: the server's ceiling here.
		if err := js.DeleteStream(ctx, DefaultStream); err != nil {
			b.Fatal(err)
		}
		benchStream(b, srv.ClientURL())
		cpu0 = cpuTime()
		ceiling, _, _ := benchPublish(b, srv.ClientURL(), ids, chains, 0)
		maxCPU := float64((cpuTime() - cpu0).Microseconds()) / float64(total)
		say("unpaced publish: %.0f msgs/s (%.1fx the %0.f msgs/s target); %.1f µs CPU per message", ceiling, ceiling/target, target, maxCPU)

		b.ReportMetric(paced, "paced-msgs/s")
		b.ReportMetric(ceiling, "max-publish-msgs/s")
		b.ReportMetric(consumed, "verify-msgs/s")
		b.ReportMetric(fed, "verify-mem-msgs/s")
		b.ReportMetric(stored, "stored-B/msg")
		b.ReportMetric(pubCPU, "publish-cpu-µs/msg")
		b.ReportMetric(fedCPU, "verify-cpu-µs/msg")
		if err := js.DeleteStream(ctx, DefaultStream); err != nil {
			b.Fatal(err)
		}
	}

}

// benchChains seals, once and in parallel, a chain per board.
func benchChains(b testing.TB, boards, n int) ([]string, [][][]byte) {
	ids := make([]string, boards)
	chains := make([][][]byte, boards)
	var wg sync.WaitGroup
	for w := range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := w; i < boards; i += runtime.GOMAXPROCS(0) {
				k := newKey(b)
				ids[i], chains[i] = k.ID(), signChain(b, k, n)
			}
		})
	}
	wg.Wait()
	return ids, chains
}

func benchStream(b *testing.B, url string) (jetstream.JetStream, jetstream.Stream) {
	_, js := connect(b, url)
	s, err := EnsureStream(context.Background(), js, StreamConfig("", 0))
	if err != nil {
		b.Fatal(err)
	}
	return js, s
}

// benchPublish publishes every chain over benchConns connections, each
// board at rate receipts/s (0: as fast as acknowledgements allow), and
// returns the acknowledged rate, the rate actually offered (the senders
// share the CPU with the server and may fall behind their schedule) and how
// long after the last send the last acknowledgement came.
func benchPublish(b *testing.B, url string, ids []string, chains [][][]byte, rate float64) (float64, float64, time.Duration) {
	conns := min(*benchConns, len(ids))
	const slots = 10 // each tick publishes for a tenth of a connection's boards
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lastSend time.Time
	errs := make(chan error, conns)
	start := time.Now()
	for c := range conns {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			// An absolute schedule: a sender that falls behind sends at
			// once rather than dropping ticks, so what it offers is known.
			step := time.Duration(0)
			if rate > 0 {
				step = time.Duration(float64(time.Second) / rate / slots)
			}
			k := 0
			for seq := range len(chains[0]) {
				for slot := range slots {
					if step > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(k) * step)))
						k++
					}
					for i := c + slot*conns; i < len(ids); i += conns * slots {
						if _, err := js.PublishMsgAsync(ReceiptMsg(ids[i], uint64(seq), chains[i][seq])); err != nil {
							errs <- err
							return
						}
					}
				}
			}
			sent := time.Now()
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				errs <- fmt.Errorf("acknowledgements outstanding after 30s: %d", js.PublishAsyncPending())
				return
			}
			mu.Lock()
			if sent.After(lastSend) {
				lastSend = sent
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	total := len(ids) * len(chains[0])
	return float64(total) / elapsed.Seconds(), float64(total) / lastSend.Sub(start).Seconds(), time.Since(lastSend)
}

// benchMemory feeds every chain to a fresh verifier and returns the heap
// it holds afterwards per steward.
func benchMemory(b *testing.B, ids []string, chains [][][]byte) float64 {
	msgs := make([]Message, 0, len(ids)*len(chains[0]))
	for seq := range len(chains[0]) {
		for i, id := range ids {
			msgs = append(msgs, msg(id, uint64(seq), chains[i][seq]))
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := NewVerifier(VerifierConfig{Trusted: ids})
	for i := 0; i < len(msgs); i += 1000 {
		v.FeedBatch(msgs[i:min(i+1000, len(msgs))])
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if r := v.Report(); !r.OK() {
		b.Fatalf("verifier: %d problems", r.ProblemCount())
	}
	runtime.KeepAlive(v)
	runtime.KeepAlive(msgs)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(ids))
}

// cpuTime is the CPU this process (server, clients and verifier alike) has
// used: on a shared machine, CPU per message says more than wall rates.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

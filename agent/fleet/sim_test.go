package fleet

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
	"meshd/wire"
)

// simEnv turns the simulation on and sets its steps: a comma-separated
// list of rate:seconds, the receipts per second per board and how long
// each step lasts ("2:60,5:20").
const simEnv = "MESH_FLEET_SIM"

// TestFleetSimulation runs boards, each on its own client connection, all
// in this process, against one JetStream server with file storage, at a
// declared rate for each step, with a verifier following the stream
// through a durable consumer. For each step it prints the rate offered and
// acknowledged, the acknowledgement latency (publish to PubAck) at p50
// and p99, the server's memory and the verifier's lag behind the stream.
// Envelopes are sealed before each step so that signing does not compete
// with what is measured; each board publishes its chain in order with
// its content ids as message ids, as the Publisher does (a Publisher per
// board would also read a receipt log per board from this one disk).
// It takes minutes: `make bench-fleet` runs it; `make test` skips it.
func TestFleetSimulation(t *testing.T) {
	spec := os.Getenv(simEnv)
	if spec == "" {
		t.Skip("set " + simEnv + "=rate:seconds,... (make bench-fleet) to run the fleet simulation")
	}
	boards := 1000
	if s := os.Getenv("MESH_FLEET_SIM_BOARDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("MESH_FLEET_SIM_BOARDS=%q: want a positive count", s)
		}
		boards = n
	}
	type step struct {
		rate float64
		secs int
	}
	var steps []step
	for _, f := range strings.Split(spec, ",") {
		r, s, ok := strings.Cut(f, ":")
		rate, err1 := strconv.ParseFloat(r, 64)
		secs, err2 := strconv.Atoi(s)
		if !ok || err1 != nil || err2 != nil || rate <= 0 || secs <= 0 {
			t.Fatalf("%s=%q: want rate:seconds,... (e.g. 2:60)", simEnv, spec)
		}
		steps = append(steps, step{rate, secs})
	}
	srv := startServer(t, t.TempDir(), -1, func(o *server.Options) { o.MaxPayload = 1 << 20 })
	_, js := connect(t, srv.ClientURL())
	ctx := context.Background()
	stream, err := EnsureStream(ctx, js, StreamConfig("", 0))
	if err != nil {
		t.Fatal(err)
	}
	// The boards: a key, a chain position and a connection each.
	keys := make([]*steward.Key, boards)
	ids := make([]string, boards)
	for i := range keys {
		keys[i] = newKey(t)
		ids[i] = keys[i].ID()
	}
	conns := make([]jetstream.JetStream, boards)
	var cw sync.WaitGroup
	var connErr atomic.Value
	for w := range 16 {
		cw.Go(func() {
			for i := w; i < boards; i += 16 {
				nc, err := nats.Connect(srv.ClientURL(), nats.Name("board "+strconv.Itoa(i)))
				if err != nil {
					connErr.Store(err)
					return
				}
				t.Cleanup(nc.Close)
				conns[i], err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
				if err != nil {
					connErr.Store(err)
					return
				}
			}
		})
	}
	cw.Wait()
	if err, _ := connErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if n := srv.NumClients(); n < boards {
		t.Fatalf("server has %d client connections, want at least %d", n, boards)
	}
	say := func(format string, a ...any) {
		fmt.Fprintf(os.Stdout, "fleet sim: "+format+"\n", a...)
	}
	say("%d boards on %d client connections to one server (file storage), GOMAXPROCS %d", boards, srv.NumClients()-1, runtime.GOMAXPROCS(0))

	// The verifier follows the stream from the start.
	v := NewVerifier(VerifierConfig{Trusted: ids})
	vctx, vstop := context.WithCancel(ctx)
	vdone := make(chan error, 1)
	go func() {
		vdone <- Consume(vctx, js, v, ConsumeConfig{Durable: "sim", Follow: true, Fetch: 1000, FetchWait: 100 * time.Millisecond})
	}()
	defer func() {
		vstop()
		if err := <-vdone; err != nil {
			t.Error(err)
		}
	}()

	sts := make([]*steward.Steward, boards)
	prev := make([]*wire.ContentID, boards)
	for i := range sts {
		sts[i] = steward.New(keys[i], nil, steward.Options{})
	}
	next := uint64(0) // every board is at the same sequence
	total := uint64(0)
	for _, st := range steps {
		per := int(st.rate * float64(st.secs))
		envs := sealSteps(t, sts, keys, prev, next, per)
		say("step %.0f receipts/s/board x %d boards = %.0f msgs/s declared for %ds (%d envelopes sealed beforehand)",
			st.rate, boards, st.rate*float64(boards), st.secs, per*boards)
		lat := make([][]time.Duration, boards)
		var sent, acked, failed atomic.Int64
		var maxLag atomic.Uint64
		start, cpu0 := time.Now(), cpuTime()
		interval := time.Duration(float64(time.Second) / st.rate)
		var wg sync.WaitGroup
		for i := range boards {
			wg.Go(func() {
				type inflight struct {
					f  jetstream.PubAckFuture
					at time.Time
				}
				q := make(chan inflight, 1024)
				var coll sync.WaitGroup
				coll.Go(func() {
					for p := range q {
						select {
						case <-p.f.Ok():
							acked.Add(1)
							lat[i] = append(lat[i], time.Since(p.at))
						case <-p.f.Err():
							failed.Add(1)
						}
					}
				})
				// Each board starts at its own offset in the interval, so
				// that the fleet's publishes are spread, as real boards'
				// are, rather than all on one tick.
				offset := time.Duration(int64(interval) * int64(i) / int64(boards))
				for j := range per {
					time.Sleep(time.Until(start.Add(offset + time.Duration(j)*interval)))
					m := ReceiptMsg(ids[i], next+uint64(j), envs[i][j])
					f, err := conns[i].PublishMsgAsync(m, jetstream.WithExpectStream(DefaultStream))
					if err != nil {
						failed.Add(1)
						continue
					}
					sent.Add(1)
					q <- inflight{f, time.Now()}
				}
				close(q)
				coll.Wait()
			})
		}
		// Sample the verifier's lag and the server's memory every second.
		var mem []int64
		tick := time.NewTicker(time.Second)
		stopSample := make(chan struct{})
		var sampled sync.WaitGroup
		sampled.Go(func() {
			for {
				select {
				case <-stopSample:
					return
				case <-tick.C:
					if vz, err := srv.Varz(nil); err == nil {
						mem = append(mem, vz.Mem)
					}
					if info, err := stream.Info(ctx); err == nil {
						if lag := info.State.LastSeq - min(info.State.LastSeq, v.Position()); lag > maxLag.Load() {
							maxLag.Store(lag)
						}
					}
				}
			}
		})
		wg.Wait()
		elapsed := time.Since(start)
		close(stopSample)
		tick.Stop()
		sampled.Wait()
		// How long the verifier takes to reach the stream's end after the
		// step's last acknowledgement.
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		caught := time.Now()
		waitFor(t, 10*time.Minute, "the verifier to catch up", func() bool { return v.Position() >= info.State.LastSeq })
		catchUp := time.Since(caught)
		cpuPer := float64((cpuTime() - cpu0).Microseconds()) / float64(max(1, acked.Load()))
		var all []time.Duration
		for _, l := range lat {
			all = append(all, l...)
		}
		slices.Sort(all)
		pct := func(p float64) time.Duration {
			if len(all) == 0 {
				return 0
			}
			return all[min(len(all)-1, int(p*float64(len(all))))]
		}
		var peak int64
		for _, m := range mem {
			peak = max(peak, m)
		}
		declared := st.rate * float64(boards)
		say("  offered %.0f msgs/s, acknowledged %.0f msgs/s (%.2f of declared) over %v; %d failed",
			float64(sent.Load())/elapsed.Seconds(), float64(acked.Load())/elapsed.Seconds(), float64(acked.Load())/elapsed.Seconds()/declared, elapsed.Round(time.Millisecond), failed.Load())
		say("  ack latency p50 %v p99 %v max %v", pct(0.50).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(time.Millisecond))
		say("  process memory (server, %d clients and the verifier, one process): peak RSS %.0f MB", boards, float64(peak)/(1<<20))
		say("  verifier lag: at most %d messages behind the stream during the step; caught up %v after it", maxLag.Load(), catchUp.Round(time.Millisecond))
		say("  CPU (getrusage, the whole process: server, clients, verifier) %.1f µs per message", cpuPer)
		if f := failed.Load(); f > 0 {
			t.Errorf("step %.0f/s: %d publishes failed", st.rate, f)
		}
		next += uint64(per)
		total += uint64(per * boards)
	}
	r := v.Report()
	if !r.OK() || len(r.Stewards) != boards {
		t.Fatalf("verifier: %d stewards, %d problems (%s)", len(r.Stewards), r.ProblemCount(), KindsString(r.Kinds()))
	}
	for _, s := range r.Stewards {
		if s.Count != next {
			t.Fatalf("steward %s: %d receipts verified, want %d", s.Steward, s.Count, next)
		}
	}
	say("every chain verified: %d stewards, %d receipts, 0 problems", boards, total)
}

// sealSteps seals n more receipts per board from sequence first, in
// parallel, continuing each board's chain.
func sealSteps(t *testing.T, sts []*steward.Steward, keys []*steward.Key, prev []*wire.ContentID, first uint64, n int) [][][]byte {
	out := make([][][]byte, len(sts))
	now := time.UnixMilli(1_767_225_600_000)
	var wg sync.WaitGroup
	w := runtime.GOMAXPROCS(0)
	for k := range w {
		wg.Go(func() {
			for i := k; i < len(sts); i += w {
				for j := range n {
					nonce := make([]byte, steward.NonceSize)
					rand.Read(nonce)
					seq := first + uint64(j)
					r, err := sts[i].Build(draft(int(seq)), seq, prev[i], nonce, now)
					if err != nil {
						t.Error(err)
						return
					}
					core, err := r.EncodeCore()
					if err != nil {
						t.Error(err)
						return
					}
					env, err := steward.Sign1(keys[i], core)
					if err != nil {
						t.Error(err)
						return
					}
					out[i] = append(out[i], env)
					id := wire.ContentOf(env)
					prev[i] = &id
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

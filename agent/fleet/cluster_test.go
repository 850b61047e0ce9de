package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/steward"
)

// startCluster runs n JetStream servers clustered over loopback, each with
// its own store. A clustered JetStream server refuses to start without
// configured routes, so the cluster ports are picked before the servers
// start: the system hands out free ports, which are closed and given to
// the servers (every server routes to all, itself included, as a
// cluster's configuration usually lists). It returns once every server has
// a route to every other and the JetStream meta group has a leader.
func startCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	// A port handed out and closed may be taken by another process before
	// the server binds it; the cluster is then started again on new ports.
	var servers []*server.Server
	for attempt := 1; servers == nil; attempt++ {
		var err error
		if servers, err = tryCluster(t, n); err != nil {
			if attempt == 3 {
				t.Fatal(err)
			}
			t.Logf("cluster start %d: %v; again on new ports", attempt, err)
		}
	}
	waitFor(t, 20*time.Second, "a full mesh of routes", func() bool {
		for _, s := range servers {
			if s.NumRoutes() < n-1 {
				return false
			}
		}
		return true
	})
	// Placement needs the leader to have heard every peer's stats, or an
	// R3 stream is refused ("no suitable peers").
	waitFor(t, 20*time.Second, "a JetStream meta leader that sees every peer", func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return true
			}
		}
		return false
	})
	// A follower that has not applied the meta group's log yet forwards
	// API requests it cannot answer.
	waitFor(t, 20*time.Second, "every server current with the JetStream meta group", func() bool {
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false
			}
		}
		return true
	})
	return servers
}

// tryCluster starts n clustered servers on ports picked now, or shuts down
// what it started and says why not.
func tryCluster(t testing.TB, n int) ([]*server.Server, error) {
	ports := make([]int, n)
	var routes []string
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var servers []*server.Server
	fail := func(err error) ([]*server.Server, error) {
		for _, s := range servers {
			s.Shutdown()
		}
		return nil, err
	}
	for i := range n {
		o := &server.Options{
			ServerName: fmt.Sprintf("mesh-%d", i),
			Host:       "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(),
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "mesh", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
		s, err := server.NewServer(o)
		if err != nil {
			return fail(err)
		}
		servers = append(servers, s)
		t.Cleanup(s.Shutdown)
		go s.Start()
	}
	for i, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			return fail(fmt.Errorf("server %d not ready within 10s (cluster port %d)", i, ports[i]))
		}
	}
	return servers, nil
}

// createStream creates the stream, trying again while the cluster cannot
// answer yet. A JetStream API request sent just after the meta group
// elected its leader may go unanswered (the leader is still applying its
// log, or steps down), and a request without a reply waits out its whole
// context; so each try has its own short deadline, and a try that did
// create the stream before its reply was lost is found by the next one.
func createStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := EnsureStream(ctx, js, cfg)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create stream %s: %d tries in %v, the last: %v", cfg.Name, try, d, err)
		}
		t.Logf("create stream %s, try %d: %v; again", cfg.Name, try, err)
		time.Sleep(100 * time.Millisecond)
	}
}

func clientURLs(servers []*server.Server) string {
	var us []string
	for _, s := range servers {
		if s.Running() {
			us = append(us, s.ClientURL())
		}
	}
	return strings.Join(us, ",")
}

// streamLeader waits until the stream has a leader with every other
// replica current, and returns the leader's server name.
func streamLeader(t testing.TB, js jetstream.JetStream, stream string, replicas int, d time.Duration) string {
	t.Helper()
	var leader string
	waitFor(t, d, "stream "+stream+" to have a leader and current replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info, err := s.Info(ctx)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false
		}
		current := 0
		for _, p := range info.Cluster.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		leader = info.Cluster.Leader
		return current >= replicas-1
	})
	return leader
}

// TestClusterLeaderKilledWhilePublishing runs a three-server JetStream
// cluster with the fleet stream at R3 and 100 boards publishing through
// real Publishers, each on its own connection; the stream's leader is shut
// down while receipts are in flight. Every receipt must land exactly once
// (the stream holds each steward's chain and nothing more) and every chain
// must verify, through a consumer on the two survivors.
func TestClusterLeaderKilledWhilePublishing(t *testing.T) {
	const boards, perBoard = 100, 20
	servers := startCluster(t, 3)
	_, js := connect(t, clientURLs(servers))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := StreamConfig("", 0)
	cfg.Replicas = 3
	createStream(t, js, cfg, time.Minute)
	leader := streamLeader(t, js, DefaultStream, 3, 20*time.Second)

	var logs syncBuffer
	plog := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nodes := make([]*node, boards)
	pubs := make([]*Publisher, boards)
	defer func() {
		if t.Failed() {
			out := logs.String()
			for i, p := range pubs {
				if st := p.Status(); st.Next != perBoard {
					t.Logf("board %d %s: %+v", i, nodes[i].id(), st)
					for _, l := range strings.Split(out, "\n") {
						if strings.Contains(l, nodes[i].id()) {
							t.Log(l)
						}
					}
				}
			}
		}
	}()
	for i := range nodes {
		nodes[i] = newNode(t, steward.LogOptions{NoSync: true})
		pubs[i] = NewPublisher(nodes[i].log, nodes[i].id(), PublisherConfig{
			ConnOptions: ConnOptions{URL: clientURLs(servers)},
			CursorPath:  nodes[i].dir + ".cursor",
			Batch:       8, AckTimeout: 2 * time.Second,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 250 * time.Millisecond,
			Logger: plog,
		})
	}
	runCtx, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for _, p := range pubs {
		running.Go(func() {
			if err := p.Run(runCtx); err != nil {
				t.Error(err)
			}
		})
	}
	defer func() { stop(); running.Wait() }()
	acked := func() (n uint64) {
		for _, p := range pubs {
			n += p.Acked()
		}
		return n
	}

	// Every board seals half its receipts, then waits for the kill and
	// seals the rest: the second half is published to the new leader,
	// the first is in flight when the old one dies.
	var sealed atomic.Int64
	var lastAcked atomic.Uint64
	defer func() {
		if t.Failed() {
			t.Logf("acknowledged %d of %d", lastAcked.Load(), boards*perBoard)
		}
	}()
	killed := make(chan struct{})
	var sealing sync.WaitGroup
	for i, n := range nodes {
		sealing.Go(func() {
			for j := range perBoard {
				if j == perBoard/2 {
					<-killed
				}
				if _, err := n.st.Seal(ctx, draft(j)); err != nil {
					t.Error(err)
					return
				}
				sealed.Add(1)
				pubs[i].Notify()
			}
		})
	}
	waitFor(t, 60*time.Second, "a tenth of the first half acknowledged", func() bool {
		return acked() >= boards*perBoard/20
	})
	var victim *server.Server
	for _, s := range servers {
		if s.Name() == leader {
			victim = s
		}
	}
	if victim == nil {
		t.Fatalf("stream leader %q is none of the servers", leader)
	}
	inFlight := sealed.Load() - int64(acked())
	victim.Shutdown()
	victim.WaitForShutdown()
	t.Logf("stream leader %s shut down with %d of %d sealed receipts not yet acknowledged", leader, inFlight, sealed.Load())
	close(killed)
	sealing.Wait()

	_, js2 := connect(t, clientURLs(servers))
	newLeader := streamLeader(t, js2, DefaultStream, 2, 30*time.Second)
	if newLeader == leader {
		t.Fatalf("stream leader is still %s after its shutdown", leader)
	}
	waitFor(t, 60*time.Second, "every receipt acknowledged", func() bool {
		if a := acked(); a != boards*perBoard {
			lastAcked.Store(a)
			return false
		}
		return true
	})

	// Exactly once: the stream holds boards×perBoard receipts.
	s, err := js2.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(ReceiptPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	var receipts uint64
	for _, n := range info.State.Subjects {
		receipts += n
	}
	if receipts != boards*perBoard {
		t.Errorf("stream holds %d receipts, want %d (lost or duplicated across the failover)", receipts, boards*perBoard)
	}
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.id())
	}
	v := NewVerifier(VerifierConfig{Trusted: ids})
	if err := Consume(ctx, js2, v, ConsumeConfig{Durable: "cluster-check"}); err != nil {
		t.Fatal(err)
	}
	r := v.Report()
	if !r.OK() || len(r.Stewards) != boards {
		t.Fatalf("after the failover: %d stewards, %d problems: %v", len(r.Stewards), r.ProblemCount(), r.Kinds())
	}
	for _, sr := range r.Stewards {
		if sr.Count != perBoard || sr.Duplicates != 0 {
			t.Errorf("steward %s: %d receipts verified, %d duplicates; want %d and 0", sr.Steward, sr.Count, sr.Duplicates, perBoard)
		}
	}
}

package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/internal/natschild"
	"meshd/steward"
)

// The child publisher: the test binary run again with these variables set
// opens a receipt log and publishes it, and hangs right after the server
// acknowledges the receipts below FLEET_CHILD_HANG_AT, before its cursor is
// written, until the parent kills it.
const childEnv = "FLEET_TEST_CHILD_PUBLISHER"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childPublisher())
	}
	if code, ok := natschild.Serve(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func childPublisher() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "child publisher:", err); return 1 }
	key, err := steward.LoadKeyFile(os.Getenv("FLEET_CHILD_KEY"))
	if err != nil {
		return fail(err)
	}
	hang, err := strconv.ParseUint(os.Getenv("FLEET_CHILD_HANG_AT"), 10, 64)
	if err != nil {
		return fail(err)
	}
	ctx := context.Background()
	l, _, err := steward.OpenLog(ctx, os.Getenv("FLEET_CHILD_LOG"), steward.LogOptions{Key: key})
	if err != nil {
		return fail(err)
	}
	p := NewPublisher(l, key.ID(), PublisherConfig{
		ConnOptions: ConnOptions{URL: os.Getenv("FLEET_CHILD_URL")},
		CursorPath:  os.Getenv("FLEET_CHILD_CURSOR"),
		Batch:       4, CheckpointEvery: 8, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
	})
	p.afterAck = func(next uint64) {
		if next >= hang {
			fmt.Printf("acked %d\n", next)
			select {} // the crash window: acknowledged, cursor not written
		}
	}
	if err := p.Run(ctx); err != nil {
		return fail(err)
	}
	return 0
}

// syncBuffer is a log sink shared by publishers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a publisher running in this process.
type running struct {
	p      *Publisher
	cancel context.CancelFunc
	done   chan error
}

func runPublisher(l *steward.Log, id string, cfg PublisherConfig) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: NewPublisher(l, id, cfg), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.p.Run(ctx) }()
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("publisher: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publisher did not stop within 10s")
	}
}

// TestFleetEndToEnd runs three boards against a real JetStream server
// through an outage (the server stopped and restarted on the same store)
// and a publisher killed between an acknowledgement and its cursor write,
// and checks that the verifier ends with every receipt of every board,
// once, linked and verified.
func TestFleetEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a JetStream server and a child process")
	}
	store := t.TempDir()
	srv := startServer(t, store, -1)
	port := srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	logs := &syncBuffer{}
	defer func() {
		if t.Failed() {
			t.Logf("publisher logs:\n%s", logs)
		}
	}()

	nodes := make([]*node, 3)
	ids := make([]string, 3)
	pubs := make([]*running, 3)
	cfg := func(i int) PublisherConfig {
		return PublisherConfig{
			ConnOptions: ConnOptions{URL: url},
			CursorPath:  filepath.Join(filepath.Dir(nodes[i].dir), "fleet.cursor"),
			Batch:       8, CheckpointEvery: 8,
			Poll: 50 * time.Millisecond, AckTimeout: 2 * time.Second,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", i),
		}
	}
	for i := range nodes {
		nodes[i] = newNode(t, steward.LogOptions{})
		ids[i] = nodes[i].id()
		pubs[i] = runPublisher(nodes[i].log, ids[i], cfg(i))
	}
	defer func() {
		for _, p := range pubs {
			p.stop(t)
		}
	}()
	sealAll := func(n int) {
		for i, nd := range nodes {
			nd.seal(t, n)
			pubs[i].p.Notify()
		}
	}

	// The verifier is run to completion again and again, as an operator's
	// cron would, each run continuing from the state file.
	statePath := filepath.Join(t.TempDir(), "verify.state")
	var v *Verifier
	verifyOnce := func() Report {
		v = NewVerifier(VerifierConfig{Trusted: ids})
		if err := v.LoadState(statePath); err != nil {
			t.Fatal(err)
		}
		_, js := connect(t, url)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := Consume(ctx, js, v, ConsumeConfig{Durable: "test-verify", FetchWait: 100 * time.Millisecond,
			Save: func() error { return v.SaveState(statePath) }})
		if err != nil {
			t.Logf("verify run: %v", err) // the stream may not exist yet
		}
		return v.Report()
	}
	waitVerified := func(want ...uint64) Report {
		t.Helper()
		var r Report
		waitFor(t, 20*time.Second, fmt.Sprintf("every chain verified to %v", want), func() bool {
			r = verifyOnce()
			if len(r.Stewards) != len(want) || !r.OK() {
				return false
			}
			for i, id := range ids {
				s, ok := r.Steward(id)
				if !ok || s.Count != want[i] || s.Head != nodes[i].log.Head() || s.Ahead != 0 {
					return false
				}
			}
			return true
		})
		return r
	}

	sealAll(10)
	waitVerified(10, 10, 10)

	// Outage: receipts sealed while the server is down are published when
	// it is back, from the logs.
	srv.Shutdown()
	srv.WaitForShutdown()
	waitFor(t, 10*time.Second, "publishers to see the outage", func() bool {
		for _, p := range pubs {
			if p.p.Status().Connected {
				return false
			}
		}
		return true
	})
	sealAll(10)
	for _, p := range pubs {
		if st := p.p.Status(); st.Next != 10 || st.Durable != 20 {
			t.Errorf("during the outage: next %d durable %d, want 10 and 20", st.Next, st.Durable)
		}
	}
	startServer(t, store, port)
	waitVerified(20, 20, 20)

	// A publisher killed between the server's acknowledgement and its
	// cursor write; its successor knows only the cursor file and the log.
	pubs[0].stop(t)
	nodes[0].seal(t, 40)
	if err := nodes[0].log.Close(); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "steward.key")
	if err := steward.WriteKeyFile(keyFile, nodes[0].key); err != nil {
		t.Fatal(err)
	}
	cursorPath := cfg(0).CursorPath
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "FLEET_CHILD_KEY="+keyFile, "FLEET_CHILD_LOG="+nodes[0].dir,
		"FLEET_CHILD_URL="+url, "FLEET_CHILD_CURSOR="+cursorPath, "FLEET_CHILD_HANG_AT=36")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l := <-line:
		if l != "acked 36" {
			t.Fatalf("child publisher said %q (stderr %s)", l, &stderr)
		}
	case <-time.After(20 * time.Second):
		child.Process.Kill()
		t.Fatalf("child publisher never reached sequence 36 (stderr %s)", &stderr)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	c, err := readCursor(cursorPath)
	if err != nil || c.Next != 32 || c.Steward != ids[0] {
		t.Fatalf("cursor after the kill: %+v %v; want the last batch before the crash, 32", c, err)
	}
	nodes[0].open(t, steward.LogOptions{})
	pubs[0] = runPublisher(nodes[0].log, ids[0], cfg(0))

	sealAll(5)
	r := waitVerified(65, 25, 25)
	for i, id := range ids {
		s, _ := r.Steward(id)
		if s.Checkpoint == 0 || !s.Trusted {
			t.Errorf("node %d: checkpoint %d trusted %v; want a matched checkpoint from a trusted steward", i, s.Checkpoint, s.Trusted)
		}
	}
	// No receipt is in the stream twice: the republished ones were
	// de-duplicated by their content ids.
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(ReceiptPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		if got, want := info.State.Subjects[ReceiptSubject(id)], nodes[i].log.Durable(); got != want {
			t.Errorf("node %d: %d receipt messages in the stream, want %d", i, got, want)
		}
	}
	if !strings.Contains(logs.String(), "fleet: caught up") || !strings.Contains(logs.String(), "fleet: disconnected") {
		t.Errorf("publisher logs lack the state changes:\n%s", logs)
	}
}

// TestPublisherLogsNoSecret checks that neither a password in the config
// nor one in the URL reaches the log, whether authentication succeeds or
// fails.
func TestPublisherLogsNoSecret(t *testing.T) {
	const user, secret, urlSecret = "board", "s3cret-Pa55word", "url-Pa55word"
	srv := startServer(t, t.TempDir(), -1, func(o *server.Options) {
		o.Users = []*server.User{{Username: user, Password: secret}, {Username: "other", Password: urlSecret}}
	})
	port := srv.Addr().(*net.TCPAddr).Port
	cases := []struct {
		name   string
		conn   ConnOptions
		ok     bool
		expect string
	}{
		{"password in config", ConnOptions{URL: srv.ClientURL(), User: user, Password: secret}, true, "fleet: caught up"},
		{"password in url", ConnOptions{URL: fmt.Sprintf("nats://other:%s@127.0.0.1:%d", urlSecret, port)}, true, "fleet: caught up"},
		{"wrong password", ConnOptions{URL: srv.ClientURL(), User: user, Password: secret + "-wrong"}, false, "uthorization"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs syncBuffer
			n := newNode(t, steward.LogOptions{NoSync: true})
			n.seal(t, 3)
			r := runPublisher(n.log, n.id(), PublisherConfig{
				ConnOptions: tc.conn,
				CursorPath:  filepath.Join(t.TempDir(), "cursor"),
				MinBackoff:  10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			})
			waitFor(t, 10*time.Second, "the log line "+tc.expect, func() bool { return strings.Contains(logs.String(), tc.expect) })
			if tc.ok && r.p.Status().Next != 3 {
				t.Errorf("published %d, want 3", r.p.Status().Next)
			}
			r.stop(t)
			// Also what a careless caller might log or print.
			slog.New(slog.NewTextHandler(&logs, nil)).Info("config", "conn", tc.conn)
			fmt.Fprintf(&logs, "%v %+v %#v %s\n", tc.conn, tc.conn, tc.conn, tc.conn)
			if testing.Verbose() {
				t.Logf("logs:\n%s", logs.String())
			}
			for _, s := range []string{secret, urlSecret} {
				if strings.Contains(logs.String(), s) {
					t.Errorf("a secret reached the log:\n%s", logs.String())
				}
			}
		})
	}
}

func TestPublisherConfigErrors(t *testing.T) {
	n := newNode(t, steward.LogOptions{NoSync: true})
	for _, tc := range []struct {
		name string
		cfg  PublisherConfig
		want string
	}{
		{"no cursor", PublisherConfig{ConnOptions: ConnOptions{URL: "nats://127.0.0.1:1"}}, "no cursor path"},
		{"no url", PublisherConfig{CursorPath: filepath.Join(t.TempDir(), "c")}, "no server URL"},
		{"cert without key", PublisherConfig{ConnOptions: ConnOptions{URL: "nats://127.0.0.1:1", CertFile: "c.pem"}, CursorPath: filepath.Join(t.TempDir(), "c")}, "both a certificate and a key"},
		{"missing seed", PublisherConfig{ConnOptions: ConnOptions{URL: "nats://127.0.0.1:1", NKeySeedFile: "/nonexistent/seed"}, CursorPath: filepath.Join(t.TempDir(), "c")}, "/nonexistent/seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error naming %q", err, tc.want)
			}
			err := NewPublisher(n.log, n.id(), tc.cfg).Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestPublisherCursorRecovery covers cursors that cannot be used as they
// are: damaged, another steward's, past the log's end. Each starts over
// somewhere safe and the stream still ends with every receipt once.
func TestPublisherCursorRecovery(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	for _, tc := range []struct {
		name   string
		cursor string
		warn   string
	}{
		{"damaged", "{not json", "cursor unreadable"},
		{"another steward", `{"steward":"` + strings.Repeat("ab", 32) + `","next":2}`, "another steward"},
		{"past the end", "", "rolled back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, steward.LogOptions{NoSync: true})
			n.seal(t, 4)
			path := filepath.Join(t.TempDir(), "cursor")
			c := tc.cursor
			if c == "" {
				c = `{"steward":"` + n.id() + `","next":99}`
			}
			if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			r := runPublisher(n.log, n.id(), PublisherConfig{ConnOptions: ConnOptions{URL: srv.ClientURL()}, CursorPath: path,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			defer r.stop(t)
			if tc.warn == "rolled back" {
				n.seal(t, 2)
				r.p.Notify()
			}
			want := n.log.Durable()
			waitFor(t, 10*time.Second, "the publisher to catch up", func() bool { return r.p.Status().Next == want })
			if !strings.Contains(logs.String(), tc.warn) {
				t.Errorf("log lacks %q:\n%s", tc.warn, logs.String())
			}
			// The cursor follows within cursorEvery of catching up, and
			// Acked with it.
			waitFor(t, 10*time.Second, "the cursor file to record the catch-up", func() bool {
				got, err := readCursor(path)
				return err == nil && got.Next == want && got.Steward == n.id() && r.p.Acked() == want
			})
		})
	}
}

// TestNextLinger: the linger doubles while the batches it gathers stay
// small, halves once they reach the target, and stays within its bounds.
func TestNextLinger(t *testing.T) {
	const lo, hi = 2 * time.Millisecond, 25 * time.Millisecond
	for _, c := range []struct {
		l    time.Duration
		n    int
		want time.Duration
	}{
		{lo, 1, 4 * time.Millisecond},
		{lo, lingerTarget - 1, 4 * time.Millisecond},
		{16 * time.Millisecond, 3, hi},
		{hi, 1, hi},
		{hi, lingerTarget, hi / 2},
		{16 * time.Millisecond, DefaultBatch, 8 * time.Millisecond},
		{3 * time.Millisecond, lingerTarget, lo},
		{lo, DefaultBatch, lo},
	} {
		if got := nextLinger(c.l, c.n, lo, hi); got != c.want {
			t.Errorf("nextLinger(%v, %d) = %v, want %v", c.l, c.n, got, c.want)
		}
	}
}

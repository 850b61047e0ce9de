package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"meshd/agent/fleet"
	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/wire"
)

// fleetServer runs a JetStream server with file storage and the fleet
// stream, and returns its URL and a client.
func fleetServer(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := fleet.EnsureStream(ctx, js, fleet.StreamConfig("", 0)); err != nil {
		t.Fatal(err)
	}
	return s.ClientURL(), js
}

// fleetChain seals n receipts with a fresh key and returns it and the
// envelopes, as a board's log holds them.
func fleetChain(t *testing.T, n int) (*steward.Key, [][]byte) {
	t.Helper()
	k, err := steward.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, _, err := steward.OpenLog(ctx, filepath.Join(t.TempDir(), "r"), steward.LogOptions{Key: k, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st := steward.New(k, l, steward.Options{})
	for i := range n {
		if _, err := st.Seal(ctx, steward.Draft{
			Request: wire.ContentOf([]byte{byte(i)}), Backend: "b", Recipe: "r", Route: "why",
			Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Estimated(10),
			Metering: estimatorMetering,
		}); err != nil {
			t.Fatal(err)
		}
	}
	envs, err := l.Range(ctx, 0, n)
	if err != nil {
		t.Fatal(err)
	}
	return k, envs
}

func publish(t *testing.T, js jetstream.JetStream, m *nats.Msg) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

func publishChain(t *testing.T, js jetstream.JetStream, id string, envs [][]byte, seqs ...int) {
	t.Helper()
	for _, i := range seqs {
		publish(t, js, fleet.ReceiptMsg(id, uint64(i), envs[i]))
	}
}

func runFleet(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := run(ctx, append([]string{"fleet", "verify"}, args...), &out, &errb)
	return out.String() + errb.String(), err
}

// TestFleetVerifyReportsTampering publishes, through a real server, a clean
// chain, a forged envelope, a tampered one, a replayed one, a dropped
// sequence and an untrusted steward, and checks that fleet verify names
// each steward with its problem, keeps reporting the gap on the next run,
// and clears it once the missing receipt arrives.
func TestFleetVerifyReportsTampering(t *testing.T) {
	url, js := fleetServer(t)
	clean, cleanEnvs := fleetChain(t, 4)
	forged, forgedEnvs := fleetChain(t, 3)
	tampered, tamperedEnvs := fleetChain(t, 3)
	replayed, replayedEnvs := fleetChain(t, 3)
	dropped, droppedEnvs := fleetChain(t, 8)
	stranger, strangerEnvs := fleetChain(t, 2)
	_, otherEnvs := fleetChain(t, 3)

	publishChain(t, js, clean.ID(), cleanEnvs, 0, 1, 2, 3)
	// Forged: a valid receipt of another key under the steward's subject.
	publishChain(t, js, forged.ID(), forgedEnvs, 0, 1)
	publish(t, js, fleet.ReceiptMsg(forged.ID(), 2, otherEnvs[2]))
	publishChain(t, js, forged.ID(), forgedEnvs, 2)
	// Tampered: one byte of the signed payload changed.
	bad := bytes.Clone(tamperedEnvs[1])
	bad[len(bad)-70] ^= 0x20
	publishChain(t, js, tampered.ID(), tamperedEnvs, 0)
	publish(t, js, fleet.ReceiptMsg(tampered.ID(), 1, bad))
	publishChain(t, js, tampered.ID(), tamperedEnvs, 1, 2)
	// Replayed: an old envelope republished later under a new message id.
	publishChain(t, js, replayed.ID(), replayedEnvs, 0, 1, 2)
	old := fleet.ReceiptMsg(replayed.ID(), 0, replayedEnvs[0])
	old.Header.Set(jetstream.MsgIDHeader, "replay-0001")
	publish(t, js, old)
	// Dropped: 5 then 7.
	publishChain(t, js, dropped.ID(), droppedEnvs, 0, 1, 2, 3, 4, 5, 7)
	publishChain(t, js, stranger.ID(), strangerEnvs, 0, 1)

	dir := t.TempDir()
	trust := filepath.Join(dir, "trusted")
	var list strings.Builder
	list.WriteString("# the fleet\n\n")
	for _, k := range []*steward.Key{clean, forged, tampered, replayed, dropped} {
		list.WriteString(k.ID() + "\n")
	}
	if err := os.WriteFile(trust, []byte(list.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	args := []string{"-url", url, "-trust", trust, "-state", state}

	out, err := runFleet(t, args...)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 {
		t.Fatalf("fleet verify: %v, want exit status 1\n%s", err, out)
	}
	lineOf := func(out, id string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, id) {
				return l
			}
		}
		t.Fatalf("no line for steward %s in\n%s", id, out)
		return ""
	}
	for _, tc := range []struct {
		name  string
		id    string
		count string
		want  string
	}{
		{"clean", clean.ID(), " 4 ", " OK"},
		{"forged", forged.ID(), " 3 ", "forged: receipt"},
		{"tampered", tampered.ID(), " 3 ", "invalid: receipt"},
		{"replayed", replayed.ID(), " 3 ", `replay: receipt ` + wire.ContentOf(replayedEnvs[0]).String() + ` republished under message id "replay-0001"`},
		{"dropped", dropped.ID(), " 6 ", "gap: sequence 6 missing"},
		{"untrusted", stranger.ID(), " 2 ", "untrusted: steward is not in the trusted list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lineOf(out, tc.id)
			if !strings.Contains(l, tc.count) || !strings.Contains(l, tc.want) {
				t.Errorf("line %q lacks count%q or %q", l, tc.count, tc.want)
			}
		})
	}
	if !strings.Contains(out, "fleet: 6 stewards, 21 receipts verified, 5 problem(s)") {
		t.Errorf("summary wrong:\n%s", out)
	}

	// The next run continues from the state: nothing new arrived, and the
	// gap is reported again.
	out, err = runFleet(t, args...)
	if !errors.As(err, &ee) || !strings.Contains(lineOf(out, dropped.ID()), "gap: sequence 6 missing") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	// The missing receipt arrives: the chain verifies through it.
	publishChain(t, js, dropped.ID(), droppedEnvs, 6)
	out, _ = runFleet(t, args...)
	if l := lineOf(out, dropped.ID()); !strings.Contains(l, " 8 ") || !strings.Contains(l, " OK") ||
		!strings.Contains(l, "seq 7 "+wire.ContentOf(droppedEnvs[7]).String()) {
		t.Errorf("after the gap filled: %q", l)
	}
}

func TestFleetVerifyCleanFleetExitsZero(t *testing.T) {
	url, js := fleetServer(t)
	k, envs := fleetChain(t, 5)
	publishChain(t, js, k.ID(), envs, 0, 1, 2, 3, 4)
	publishChain(t, js, k.ID(), envs, 2, 3) // republished after a crash: de-duplicated
	out, err := runFleet(t, "-url", url, "-durable", "ops")
	if err != nil {
		t.Fatalf("clean fleet: %v\n%s", err, out)
	}
	if !strings.Contains(out, "fleet: 1 stewards, 5 receipts verified, 0 problem(s)") || !strings.Contains(out, "no -trust list") {
		t.Errorf("output:\n%s", out)
	}
}

func TestFleetVerifyUsage(t *testing.T) {
	dir := t.TempDir()
	badTrust := filepath.Join(dir, "bad")
	os.WriteFile(badTrust, []byte(strings.Repeat("ab", 32)+"\nnot-a-key\n"), 0o600)
	emptyTrust := filepath.Join(dir, "empty")
	os.WriteFile(emptyTrust, []byte("# nobody\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"fleet"}, "needs a subcommand"},
		{"unknown subcommand", []string{"fleet", "watch"}, `unknown fleet subcommand "watch"`},
		{"stray argument", []string{"fleet", "verify", "x"}, "takes no arguments"},
		{"bad trust line", []string{"fleet", "verify", "-trust", badTrust}, "line 2"},
		{"empty trust", []string{"fleet", "verify", "-trust", emptyTrust}, "no steward ids"},
		{"missing trust", []string{"fleet", "verify", "-trust", filepath.Join(dir, "none")}, "-trust"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// lockedBuffer is written by the command's goroutine and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With -follow, a problem is printed when it arrives, and the report and
// exit status come when the run is interrupted.
func TestFleetVerifyFollow(t *testing.T) {
	url, js := fleetServer(t)
	k, envs := fleetChain(t, 4)
	_, other := fleetChain(t, 4)
	publishChain(t, js, k.ID(), envs, 0, 1)
	var out lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"fleet", "verify", "-url", url, "-follow"}, &out, &out) }()
	// A forgery arrives while it follows: another key's receipt under
	// this steward's subject.
	publish(t, js, fleet.ReceiptMsg(k.ID(), 1, other[1]))
	deadline, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	for !strings.Contains(out.String(), "problem: steward "+k.ID()+": forged: receipt ") {
		select {
		case <-deadline.Done():
			cancel()
			t.Fatalf("forgery not printed while following:\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	err := <-done
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(out.String(), "fleet: 1 stewards, 2 receipts verified, 1 problem(s)") {
		t.Errorf("after interrupt: %v\n%s", err, out.String())
	}
}

// TestFleetVerifyTableNamesRealProblem publishes what an attacker or a
// broken board would, each under a message id of its own making (as
// `nats pub -H Nats-Msg-Id:...` does): garbage, a fleet member's receipt
// under another's subject, an outsider's receipt, a subject naming a
// made-up steward id, and a valid receipt under a made-up message id. The
// table, without -follow, names each steward's real problem and kinds; a
// made-up message id on garbage is not a replay.
func TestFleetVerifyTableNamesRealProblem(t *testing.T) {
	url, js := fleetServer(t)
	garbled, garbledEnvs := fleetChain(t, 2)
	victim, victimEnvs := fleetChain(t, 2)
	neighbour, neighbourEnvs := fleetChain(t, 2)
	target, targetEnvs := fleetChain(t, 2)
	outsider, outsiderEnvs := fleetChain(t, 2)
	madeUp, _ := fleetChain(t, 0)
	relabelled, relabelledEnvs := fleetChain(t, 2)

	withID := func(m *nats.Msg, id string) *nats.Msg {
		m.Header.Set(jetstream.MsgIDHeader, id)
		return m
	}
	publishChain(t, js, garbled.ID(), garbledEnvs, 0, 1)
	publish(t, js, withID(fleet.ReceiptMsg(garbled.ID(), 2, []byte("\x00garbage")), "audit-garbage"))
	publishChain(t, js, victim.ID(), victimEnvs, 0)
	publish(t, js, withID(fleet.ReceiptMsg(victim.ID(), 1, neighbourEnvs[1]), "audit-wrong-key"))
	publishChain(t, js, victim.ID(), victimEnvs, 1)
	publishChain(t, js, neighbour.ID(), neighbourEnvs, 0, 1)
	publishChain(t, js, target.ID(), targetEnvs, 0, 1)
	publish(t, js, withID(fleet.ReceiptMsg(target.ID(), 2, outsiderEnvs[0]), "audit-outsider"))
	publish(t, js, withID(fleet.ReceiptMsg(madeUp.ID(), 0, outsiderEnvs[1]), "audit-made-up"))
	publishChain(t, js, relabelled.ID(), relabelledEnvs, 0)
	publish(t, js, withID(fleet.ReceiptMsg(relabelled.ID(), 1, relabelledEnvs[1]), "audit-relabel"))

	trust := filepath.Join(t.TempDir(), "trusted")
	var list strings.Builder
	for _, k := range []*steward.Key{garbled, victim, neighbour, target, relabelled} {
		list.WriteString(k.ID() + "\n")
	}
	if err := os.WriteFile(trust, []byte(list.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runFleet(t, "-url", url, "-trust", trust)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 {
		t.Fatalf("fleet verify: %v, want exit status 1\n%s", err, out)
	}
	if strings.Contains(out, "replay") {
		t.Errorf("nothing was replayed, yet the output says so:\n%s", out)
	}
	for _, tc := range []struct {
		name  string
		id    string
		kinds string
		want  string
	}{
		{"garbage", garbled.ID(), "1 invalid", "invalid: receipt " + wire.ContentOf([]byte("\x00garbage")).String() + ": envelope: not a tagged COSE_Sign1"},
		{"wrong key", victim.ID(), "1 forged", "forged: receipt " + wire.ContentOf(neighbourEnvs[1]).String() + " under this steward's subject is signed by key " + neighbour.ID() + ", another trusted steward"},
		{"outsider key", target.ID(), "1 forged", "forged: receipt " + wire.ContentOf(outsiderEnvs[0]).String() + " under this steward's subject is signed by key " + outsider.ID() + ", which is not in the trusted list"},
		{"made-up steward id", madeUp.ID(), "1 forged, 1 untrusted", "forged: receipt " + wire.ContentOf(outsiderEnvs[1]).String() + " under this steward's subject is signed by key " + outsider.ID() + ", which is not in the trusted list"},
		{"made-up message id", relabelled.ID(), "1 message-id", `message-id: receipt ` + wire.ContentOf(relabelledEnvs[1]).String() + ` published under message id "audit-relabel", not its content id`},
		{"clean neighbour", neighbour.ID(), " - ", " OK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, tc.id) {
					line = l
				}
			}
			k, f := strings.Index(line, tc.kinds), strings.Index(line, tc.want)
			if k < 0 || f < k {
				t.Errorf("line %q lacks kinds %q or first problem %q", line, tc.kinds, tc.want)
			}
		})
	}
	if !strings.Contains(out, "fleet: 6 stewards, 10 receipts verified, 6 problem(s): 3 forged, 1 invalid, 1 message-id, 1 untrusted") {
		t.Errorf("summary wrong:\n%s", out)
	}
}

// TestFleetVerifyShards verifies a stream partitioned into shards with one
// consumer and state file per shard, and refuses -shards on a stream that
// is not partitioned so (which would otherwise report an empty fleet).
func TestFleetVerifyShards(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := fleet.EnsureStream(ctx, js, fleet.ShardedStreamConfig("", 4)); err != nil {
		t.Fatal(err)
	}
	var first *steward.Key
	for i := range 8 {
		k, envs := fleetChain(t, 3)
		publishChain(t, js, k.ID(), envs, 0, 1, 2)
		if i == 0 {
			first = k
		}
	}
	_, other := fleetChain(t, 4)
	publish(t, js, fleet.ReceiptMsg(first.ID(), 3, other[3]))
	state := filepath.Join(t.TempDir(), "state")
	url := s.ClientURL()
	out, err := runFleet(t, "-url", url, "-shards", "4", "-state", state)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(out, "fleet: 8 stewards, 24 receipts verified, 1 problem(s): 1 forged") {
		t.Fatalf("sharded verify: %v\n%s", err, out)
	}
	// Each shard that had messages keeps its own state file.
	files, _ := filepath.Glob(state + ".[0-3]")
	if len(files) < 2 {
		t.Errorf("state files %v: want one per shard that had messages, at least 2 of 4", files)
	}
	// A second run continues from each shard's state and finds the same.
	if out, err := runFleet(t, "-url", url, "-shards", "4", "-state", state); !errors.As(err, &ee) || !strings.Contains(out, "fleet: 8 stewards, 24 receipts verified, 1 problem(s): 1 forged") {
		t.Errorf("second sharded run: %v\n%s", err, out)
	}
	if _, err := runFleet(t, "-url", url, "-shards", "3"); err == nil || !strings.Contains(err.Error(), "is not partitioned into 3 shards") {
		t.Errorf("-shards 3 on a stream of 4: %v", err)
	}
}

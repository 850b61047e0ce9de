package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"meshd/internal/testbin"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"meshd/steward"
	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

// buildMeshd is ./cmd/meshd built for a test that needs a real process
// (one it can kill -9).
func buildMeshd(t *testing.T) string { return testbin.Build(t, "meshd/cmd/meshd") }

// childDaemon is `meshd serve` running as a child process.
type childDaemon struct {
	t      *testing.T
	cmd    *exec.Cmd
	base   string
	logs   *syncBuffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
}

// startChild runs `meshd serve -config cfg` and waits until it listens and
// /readyz answers 200. Its log must be JSON (the listening line names the
// port it was given).
func startChild(t *testing.T, bin, cfg string) *childDaemon {
	t.Helper()
	c := &childDaemon{t: t, cmd: exec.Command(bin, "serve", "-config", cfg), logs: &syncBuffer{}, exited: make(chan struct{})}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			c.logs.Write(append(slices.Clone(line), '\n'))
			var l struct{ Msg, Addr, Network string }
			if json.Unmarshal(line, &l) == nil && l.Msg == "listening" && l.Network == "tcp" {
				select {
				case addr <- l.Addr:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			c.cmd.Process.Kill()
			<-c.exited
		}
	})
	select {
	case a := <-addr:
		c.base = "http://" + a
	case <-c.exited:
		t.Fatalf("meshd exited before listening: %v\n%s", c.err, c.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("meshd did not listen within 2 minutes\n%s", c.logs.String())
	}
	// It listens before it is ready only for an instant; poll, generously.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		resp, err := http.Get(c.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("meshd not ready: %v\n%s", err, c.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// terminate stops the child as systemd does and waits for a clean exit.
func (c *childDaemon) terminate() {
	c.t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		c.t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("meshd did not stop on SIGTERM\n%s", c.logs.String())
	}
	if c.err != nil || !strings.Contains(c.logs.String(), "stopped cleanly") {
		c.t.Fatalf("meshd did not stop cleanly: %v\n%s", c.err, c.logs.String())
	}
}

// tornFrame is the start of a frame of size random bytes whose body never
// reached the file: a valid header and the first n bytes of the body.
func tornFrame(size, n int) []byte {
	body := make([]byte, size)
	rand.Read(body)
	tab := crc32.MakeTable(crc32.Castagnoli)
	var hdr [12]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(body)))
	binary.BigEndian.PutUint32(hdr[4:], crc32.Checksum(body, tab))
	binary.BigEndian.PutUint32(hdr[8:], crc32.Checksum(hdr[:8], tab))
	return append(hdr[:], body[:n]...)
}

// appendTornFrame appends to path the start of a frame whose body never
// reached the file (a quarter of it), what a power cut in the middle of an
// append leaves (framelog's torn tail). It returns the bytes appended.
func appendTornFrame(t *testing.T, path string, size int) int64 {
	t.Helper()
	torn := tornFrame(size, size/4)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(torn); err != nil {
		t.Fatal(err)
	}
	return int64(len(torn))
}

// tearFrameAt writes at offset at of path, where the frames end, the start
// of a frame whose body reached the disk only up to a sector boundary:
// what a power cut leaves in a preallocated segment, the zeros after it
// those the writer kept ahead of its frames. It returns the bytes from at
// to the end of the file, all of which the restart must cut.
func tearFrameAt(t *testing.T, path string, at int64) int64 {
	t.Helper()
	const size = 1200 // longer than a sector past its header, so a boundary falls inside
	n := int((at+12+511)/512*512 - (at + 12))
	if n == 0 {
		n = 512
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(tornFrame(size, n), at); err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size() - at
}

// ledgerTornTail is the torn tail a ledger's recovery would cut, read
// from a copy so that the ledger itself is left as the kill left it.
func ledgerTornTail(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "ledger")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l, rec, err := ledger.Open(cp, nil, ledger.Options{NoSync: true})
	if err != nil {
		t.Fatalf("the ledger after the kill: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if rec.TornBytes > 0 {
		t.Logf("the kill left a torn write of %d bytes in the ledger", rec.TornBytes)
	}
	return rec.TornBytes
}

// kill -9 under load, then restart on the same state: every receipt a
// client received is in the log as it was received, the chain verifies,
// the sequence goes on where the log ends, and each grant's ledger account
// equals the debits its receipts state and is not overdrawn. A kill -9
// loses nothing the kernel was given, but it can cut a write short at a
// page boundary (the kernel copies a write page by page and stops at a
// fatal signal), so the kill may itself leave a torn frame; the test
// measures that tail with the offline readers, adds a torn frame to the
// log (if the kill left none) and to the ledger, as a power cut would, and
// the restart must cut and report both tails whole.
func TestKill9UnderLoadThenRestart(t *testing.T) {
	bin := buildMeshd(t)
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	issuer, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "meshd.toml")
	cfg := fmt.Sprintf(`[steward]
state_dir = %q
checkpoint_every = 64

[listen]
tcp = ["127.0.0.1:0"]
serve_timeout = "30s"
shutdown_timeout = "10s"

[grants]
trusted_issuers = [%q]

[log]
format = "json"
%s`, state, issuer.ID(), loadBackends)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startChild(t, bin, cfgPath)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The steward key as the daemon names it, checked below against its
	// key file.
	var head struct{ Steward string }
	resp, err := http.Get(d.base + "/v1/chain/head")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&head)
	resp.Body.Close()
	pub, err := steward.ParsePublicKey(head.Steward)
	if err != nil {
		t.Fatalf("chain head names steward %q: %v", head.Steward, err)
	}

	// A granted serve holds its ceiling (2000 µJ) and is debited its
	// estimate: 3 prompt words and 4 tokens out at 40 µJ a token (the
	// backend's uj_per_token), 280 µJ. A third of the clients serve on
	// grant 0, whose budget their holds alone exceed and their serves
	// before the kill spend (a client refused budget_exhausted serves on
	// without the grant), so it runs out under concurrency; a third on
	// grant 1, which lasts, so its serves are in flight, holding, when the
	// kill comes; a third on none.
	const (
		ceilingUJ  = 2_000
		ujPerToken = 40
		clients    = 51
		killAfter  = 400
	)
	now := time.Now()
	type testGrant struct {
		*grant.Signed
		b64 string
	}
	var grants []testGrant
	for _, budget := range []uint64{30_000, 100_000_000} {
		g, err := grant.Issue(issuer, grant.Grant{Audience: []ed25519.PublicKey{pub}, Holder: "kill -9 test", Action: grant.ActionInfer,
			AnyRequest: true, BudgetUJ: budget, NotBefore: now.Add(-time.Minute), Expires: now.Add(time.Hour)}, rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, testGrant{g, base64.StdEncoding.EncodeToString(g.Envelope)})
	}

	rc := newReceiptClient(d.base, pub, clients)
	var (
		killed    atomic.Bool
		answered  atomic.Int64
		reached   = make(chan struct{})
		mu        sync.Mutex
		received  = map[uint64][]byte{}
		exhausted atomic.Int64
		lost      atomic.Int64 // transport errors after the kill
		wg        sync.WaitGroup
	)
	for c := range clients {
		wg.Go(func() {
			var g *testGrant
			if c%3 < len(grants) {
				g = &grants[c%3]
			}
			for i := 0; !killed.Load(); i++ {
				body := map[string]any{"prompt": fmt.Sprintf("crash c%d i%d", c, i), "max_tokens": 4}
				if g != nil {
					body["grant"], body["joule_ceiling_uj"] = g.b64, ceilingUJ
				}
				s, err := rc.serve(ctx, body)
				switch {
				case err != nil && killed.Load():
					// Cut off by the kill, before or during its reply.
					lost.Add(1)
					return
				case err != nil:
					t.Errorf("client %d before the kill: %v", c, err)
					return
				case s.status == http.StatusOK:
					seq := s.opened.Receipt.Sequence
					if gid := s.opened.Receipt.GrantID; (g != nil) != (gid != nil) || (g != nil && *gid != g.ID.String()) {
						t.Errorf("receipt %d: client %d's grant %v, the receipt's %v", seq, c, g, gid)
					}
					mu.Lock()
					if _, dup := received[seq]; dup {
						t.Errorf("sequence %d received twice", seq)
					}
					received[seq] = s.env
					mu.Unlock()
					if answered.Add(1) == killAfter {
						close(reached)
					}
				case g != nil && s.status == http.StatusPaymentRequired && s.code == "budget_exhausted":
					exhausted.Add(1)
					g = nil
				default:
					t.Errorf("client %d: HTTP %d %s: %s", c, s.status, s.code, s.msg)
					return
				}
			}
		})
	}
	select {
	case <-reached:
	case <-d.exited:
		t.Fatalf("meshd exited under load: %v\n%s", d.err, d.logs.String())
	case <-ctx.Done():
		t.Fatalf("only %d replies before the deadline", answered.Load())
	}
	// The flag goes up before the kill, so any client that fails on the
	// dead connection already sees it.
	killed.Store(true)
	if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	wg.Wait()
	rc.close()
	if t.Failed() {
		t.FailNow()
	}

	// What a power cut during the next appends would have left: a torn
	// final frame in the log's last segment and in the ledger.
	segs, _ := filepath.Glob(filepath.Join(state, "receipts", "*.seg"))
	if len(segs) == 0 {
		t.Fatal("no log segment")
	}
	slices.Sort(segs)
	// (A ledger record is at most 64 bytes, a receipt a few hundred.)
	killed0, err := steward.VerifyLog(ctx, filepath.Join(state, "receipts"), steward.VerifyOptions{Trusted: pub})
	if err != nil {
		t.Fatalf("the log after the kill: %v", err)
	}
	if killed0.TornBytes > 0 && killed0.TornSegment != filepath.Base(segs[len(segs)-1]) {
		t.Fatalf("the kill tore segment %s, not the last one", killed0.TornSegment)
	}
	// The segment being written is preallocated: zeros follow its frames,
	// and a power cut tears the next frame there. If the kill itself tore
	// one, that is the tail.
	tornLog := killed0.TornBytes
	if tornLog == 0 {
		tornLog = tearFrameAt(t, segs[len(segs)-1], killed0.Size)
	}
	tornLedger := ledgerTornTail(t, filepath.Join(state, "ledger")) + appendTornFrame(t, filepath.Join(state, "ledger"), 48)
	if killed0.TornBytes > 0 {
		t.Logf("the kill left a torn write of %d bytes in the log", killed0.TornBytes)
	}

	d2 := startChild(t, bin, cfgPath)
	logs := d2.logs.String()
	if !regexp.MustCompile(`"msg":"receipt log: cut a torn final frame","bytes":` + strconv.FormatInt(tornLog, 10)).MatchString(logs) {
		t.Errorf("restart did not log the log's torn tail of %d bytes:\n%s", tornLog, logs)
	}
	if !strings.Contains(logs, fmt.Sprintf(`"torn_bytes":%d,`, tornLedger)) {
		t.Errorf("restart did not report the ledger's torn tail of %d bytes:\n%s", tornLedger, logs)
	}
	var open struct{ Receipts uint64 }
	var restartLedger struct {
		Records, Settled, Released, Corrected int
		TornBytes                             int64 `json:"torn_bytes"`
	}
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `"msg":"receipt log open"`) {
			json.Unmarshal([]byte(line), &open)
		}
		if strings.Contains(line, `"msg":"grant ledger recovered"`) {
			json.Unmarshal([]byte(line), &restartLedger)
		}
	}
	recovered := open.Receipts
	maxSeq := slices.Max(slices.Collect(maps.Keys(received)))
	if recovered <= maxSeq || recovered < uint64(len(received)) {
		t.Fatalf("restart recovered %d receipts; the clients received %d, up to sequence %d", recovered, len(received), maxSeq)
	}

	// Every receipt a client received is in the log, byte for byte.
	rc2 := newReceiptClient(d2.base, pub, 4)
	defer rc2.close()
	for seq, env := range received {
		resp, err := rc2.hc.Get(fmt.Sprintf("%s/v1/receipts/%d", d2.base, seq))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, env) {
			t.Errorf("receipt %d after the restart: HTTP %d, %d bytes, not the %d received", seq, resp.StatusCode, len(got), len(env))
		}
	}

	// The chain goes on where the recovered log ends: no sequence reused
	// or skipped across the crash. The grants serve on if budget is left.
	for i := range 3 {
		s, err := rc2.serve(ctx, map[string]any{"prompt": fmt.Sprintf("after the crash %d", i), "max_tokens": 4})
		if err != nil || s.status != http.StatusOK || s.opened.Receipt.Sequence != recovered+uint64(i) {
			t.Fatalf("serve %d after the restart: %v HTTP %d %s, sequence %v (want %d)", i, err, s.status, s.msg, s.opened, recovered+uint64(i))
		}
	}
	after := uint64(3)
	for i, g := range grants {
		s, err := rc2.serve(ctx, map[string]any{"prompt": fmt.Sprintf("granted after the crash %d", i), "max_tokens": 4, "grant": g.b64, "joule_ceiling_uj": ceilingUJ})
		switch {
		case err == nil && s.status == http.StatusOK:
			after++
		case err == nil && s.code == "budget_exhausted":
		default:
			t.Fatalf("serve on grant %d after the restart: %v HTTP %d %s %s", i, err, s.status, s.code, s.msg)
		}
	}

	// The daemon's own view of the grants, before it stops.
	resp, err = rc2.hc.Get(d2.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	remainingJ := make([]float64, len(grants))
	for i, g := range grants {
		m := regexp.MustCompile(`(?m)^meshd_grant_budget_remaining_joules\{grant="` + g.ID.String() + `"\} (\S+)$`).FindSubmatch(metrics)
		if m == nil {
			t.Fatalf("metrics have no budget for grant %s:\n%s", g.ID, metrics)
		}
		if remainingJ[i], err = strconv.ParseFloat(string(m[1]), 64); err != nil {
			t.Fatal(err)
		}
	}
	d2.terminate()

	// Offline: the chain verifies under the steward's key file, and the
	// grant's debits in it are what the ledger holds.
	key, err := steward.LoadKeyFile(filepath.Join(state, "steward.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !key.Public().Equal(pub) {
		t.Fatalf("the daemon named steward %x; its key file holds %s", []byte(pub), key.ID())
	}
	debits := map[string]uint64{}
	served := map[string]int{}
	rep, err := steward.VerifyLog(ctx, filepath.Join(state, "receipts"), steward.VerifyOptions{Trusted: pub, Visit: func(o *steward.Opened) error {
		r := o.Receipt
		if r.GrantID != nil {
			served[*r.GrantID]++
			debits[*r.GrantID] += *r.GrantDebitUJ
			// The debit is the serve's estimate, under the ceiling held.
			if want := ujPerToken * uint64(r.TokensIn+r.TokensOut); *r.GrantDebitUJ != want || want > ceilingUJ {
				return fmt.Errorf("receipt %d debited %d µJ for %d+%d tokens, want %d", r.Sequence, *r.GrantDebitUJ, r.TokensIn, r.TokensOut, want)
			}
		}
		if env, ok := received[r.Sequence]; ok && wire.ContentOf(env) != o.ID {
			return fmt.Errorf("receipt %d in the log is %s, not the %s received", r.Sequence, o.ID, wire.ContentOf(env))
		}
		return nil
	}})
	if err != nil {
		t.Fatalf("log after the restart: %v", err)
	}
	if rep.Records != recovered+after || rep.TornBytes != 0 {
		t.Fatalf("log after the restart: %d records, %d torn bytes; recovered %d, then %d serves", rep.Records, rep.TornBytes, recovered, after)
	}
	st, err := grant.OpenStores(ctx, filepath.Join(state, "receipts"), filepath.Join(state, "ledger"), key, steward.LogOptions{}, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t.Logf("kill -9 after %d replies: %d received (%d budget_exhausted, %d cut off by the kill), %d in the log at restart; "+
		"ledger recovery at restart %s; offline recovery %+v",
		killAfter, len(received), exhausted.Load(), lost.Load(), recovered, fmt.Sprintf("%+v", restartLedger), *st.Recovery)
	if len(served) > len(grants) {
		t.Errorf("receipts name %d grants, %d were issued", len(served), len(grants))
	}
	for i, g := range grants {
		id := g.ID.String()
		bal, ok := st.Ledger.Balance(g.ID)
		t.Logf("grant %d: %d serves debited %d µJ of %d; balance %+v; the daemon's metrics said %g J left", i, served[id], debits[id], g.BudgetUJ, bal, remainingJ[i])
		switch {
		case !ok:
			t.Fatalf("the ledger has no account for grant %d", i)
		case served[id] == 0:
			t.Errorf("no receipt in the log for grant %d", i)
		case bal.OverdrawnUJ != 0 || bal.SpentUJ+bal.HeldUJ > g.BudgetUJ:
			t.Errorf("grant %d overdrawn: %+v", i, bal)
		case bal.HeldUJ != 0 || bal.OpenHolds != 0:
			t.Errorf("grant %d: holds still open after a clean stop: %+v", i, bal)
		case bal.SpentUJ != debits[id]:
			t.Errorf("grant %d: the ledger spent %d µJ; the log's receipts debited %d", i, bal.SpentUJ, debits[id])
		case bal.BudgetUJ != g.BudgetUJ:
			t.Errorf("grant %d: ledger budget %d, the grant's %d", i, bal.BudgetUJ, g.BudgetUJ)
		case math.Round(remainingJ[i]*1e6) != float64(g.BudgetUJ-debits[id]):
			t.Errorf("grant %d: the daemon's metrics said %g J left; the receipts leave %d µJ", i, remainingJ[i], g.BudgetUJ-debits[id])
		}
	}
	// The restarted daemon's ledger needed no repair at this open: it was
	// already what the receipts say.
	if rec := st.Recovery; rec.Settled+rec.Released+rec.Corrected != 0 || rec.TornBytes != 0 {
		t.Errorf("offline open repaired the ledger the daemon left: %+v", *rec)
	}
}

package remote_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"meshd/engine/remote"
	"meshd/steward"
	"meshd/wire"
)

// counting relays every request to the node its target names and counts
// them by method and route.
type counting struct {
	*httptest.Server
	target atomic.Pointer[string]
	mu     sync.Mutex
	n      map[string]int
}

func newCounting(t *testing.T, target string) *counting {
	c := &counting{n: map[string]int{}}
	c.target.Store(&target)
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.Path
		if strings.HasPrefix(r.URL.Path, "/v1/receipts/") {
			route = r.Method + " /v1/receipts/{seq}"
		}
		c.mu.Lock()
		c.n[route]++
		c.mu.Unlock()
		status, data, err := relay(*c.target.Load(), r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.WriteHeader(status)
		w.Write(data)
	}))
	t.Cleanup(c.Close)
	return c
}

// counts is how many head reads, receipt reads and serves the node got.
func (c *counting) counts() [3]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [3]int{c.n["GET /v1/chain/head"], c.n["GET /v1/receipts/{seq}"], c.n["POST /v1/serve"]}
}

// pinned is a backend of kind meshd pinned under key.
func pinned(name, key, url string, uj int) string {
	return fmt.Sprintf("[[backend]]\nname = %q\nkind = \"meshd\"\nurl = %q\nsteward = %q\nfidelity = 2\nuj_per_token = %d\ntimeout = \"10s\"\n",
		name, url, key, uj)
}

func otherKey(t *testing.T) string {
	k, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID()
}

// A node pinned under the wrong key is caught by its chain head before it
// is sent the serve: the first request falls back to the next node, its
// receipt lists the first as failed, and the node served nothing. Were its
// log empty, there would be no head to check: the serve is forwarded and
// the node's receipt refuses it, as a serve that may have been served.
func TestWrongKeyFailsBeforeServing(t *testing.T) {
	for _, c := range []struct {
		name     string
		receipts int    // in the wrongly pinned node's log beforehand
		counts   [3]int // head reads, receipt reads, serves it got
		fallback bool
		says     string
	}{
		{"a node with receipts", 1, [3]int{1, 1, 0}, true, "chain head (receipt 0) does not verify under its pinned steward key"},
		{"an empty log", 0, [3]int{1, 0, 1}, false, "does not verify under its steward key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cheap, dear := startUpstream(t, 10), startUpstream(t, 50)
			for i := range c.receipts {
				if _, err := serve(t, cheap.n, fmt.Sprintf("served at the node itself %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			door := newCounting(t, cheap.srv.URL)
			front, _ := startNode(t, pinned("cheap", otherKey(t), door.URL, 10)+remoteBackend("dear", dear, dear.srv.URL, 50))
			resp, err := serve(t, front, "the first request")
			if got := door.counts(); got != c.counts {
				t.Fatalf("the node got %v (head reads, receipt reads, serves), want %v", got, c.counts)
			}
			if !c.fallback {
				if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "may have served it") {
					t.Fatalf("serve: %v, want the receipt refused (%q) and not tried elsewhere", err, c.says)
				}
				if front.Stores.Log.Durable() != 0 || dear.n.Stores.Log.Durable() != 0 || cheap.n.Stores.Log.Durable() != 1 {
					t.Fatalf("sealed: front %d, dear %d, cheap %d; want 0, 0, 1", front.Stores.Log.Durable(), dear.n.Stores.Log.Durable(), cheap.n.Stores.Log.Durable())
				}
				return
			}
			if err != nil || resp.Sealed.Receipt.Backend != "dear" || !strings.Contains(resp.Decision.Candidates[0].Reason, c.says) {
				t.Fatalf("serve: %v %+v", err, resp)
			}
			o, err := steward.OpenEnvelope(resp.Sealed.Envelope, front.Key.Public())
			if err != nil {
				t.Fatal(err)
			}
			cs, _ := o.Receipt.Candidates()
			if len(cs) != 2 || cs[0].Verdict != steward.VerdictFailed || cs[1].Verdict != steward.VerdictAdmissible || !strings.Contains(o.Receipt.Route, "after 1 failed") {
				t.Fatalf("the receipt's route %q, candidates %q", o.Receipt.Route, *o.Receipt.RouteCandidates)
			}
			if cheap.n.Stores.Log.Durable() != uint64(c.receipts) || dear.n.Stores.Log.Durable() != 1 {
				t.Fatalf("sealed: cheap %d (want %d, nothing new), dear %d", cheap.n.Stores.Log.Durable(), c.receipts, dear.n.Stores.Log.Durable())
			}
		})
	}
}

// The key check is made once: later serves go straight to /v1/serve.
// With an empty log there is no head to check, and the first forwarded
// receipt that verifies stands for it.
func TestKeyCheckIsCached(t *testing.T) {
	for _, c := range []struct {
		name     string
		receipts int
		counts   [3]int
	}{
		{"a node with receipts", 2, [3]int{1, 1, 3}},
		{"an empty log", 0, [3]int{1, 0, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t, 10)
			for i := range c.receipts {
				if _, err := serve(t, up.n, fmt.Sprintf("served at the node itself %d", i)); err != nil {
					t.Fatal(err)
				}
			}
			door := newCounting(t, up.srv.URL)
			front, _ := startNode(t, remoteBackend("far", up, door.URL, 10))
			for i := range 3 {
				resp, err := serve(t, front, fmt.Sprintf("forwarded %d", i))
				if err != nil || resp.Sealed.Receipt.UpstreamReceipt == nil {
					t.Fatalf("serve %d: %v", i, err)
				}
			}
			if got := door.counts(); got != c.counts {
				t.Fatalf("the node got %v (head reads, receipt reads, serves), want %v", got, c.counts)
			}
		})
	}
}

// A node that restarts under a new key behind the same address is caught
// by the receipt of the first serve it gets (the check was cached); that
// failure clears the check, so once the backoff has passed the next serve
// checks again and fails before the node is sent anything. Back under the
// pinned key, the check passes and the node serves.
func TestRestartUnderNewKeyRechecks(t *testing.T) {
	a, b := startUpstream(t, 10), startUpstream(t, 10)
	if _, err := serve(t, a.n, "a receipt for a's head"); err != nil {
		t.Fatal(err)
	}
	door := newCounting(t, a.srv.URL)
	now := time.Unix(1_700_000_000, 0)
	be, err := remote.New(remote.Config{Name: "far", URL: door.URL, Steward: a.n.Key.Public(), Fidelity: 2, UJPerToken: 10,
		Timeout: 10 * time.Second, Backoff: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	forward := func(prompt string) error {
		p := []byte(prompt)
		_, err := be.Serve(context.Background(), wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 4, MaxTokens: 5,
			FidelityFloor: 2, JouleCeilingUJ: 1e6}, p)
		return err
	}
	served := func(err error) bool {
		var s interface{ MayHaveServed() bool }
		return errors.As(err, &s) && s.MayHaveServed()
	}
	urlB := b.srv.URL
	for _, step := range []struct {
		name    string
		switchB bool          // the address now reaches b
		advance time.Duration // the clock moves on first
		err     string        // "" for served
		counts  [3]int        // head reads, receipt reads, serves so far
	}{
		{"first serve checks", false, 0, "", [3]int{1, 1, 1}},
		{"second serve goes straight", false, 0, "", [3]int{1, 1, 2}},
		{"restarted under b's key: the receipt refuses", true, 0, "may have served it", [3]int{1, 1, 3}},
		{"after the backoff: checked again, not sent", false, 10 * time.Second, "chain head (receipt 0) does not verify", [3]int{2, 2, 3}},
	} {
		now = now.Add(step.advance)
		if step.switchB {
			door.target.Store(&urlB)
		}
		err := forward(step.name)
		switch {
		case step.err == "" && err != nil:
			t.Fatalf("%s: %v", step.name, err)
		case step.err != "" && (err == nil || !strings.Contains(err.Error(), step.err)):
			t.Fatalf("%s: %v, want %q", step.name, err, step.err)
		case step.err != "" && served(err) != strings.Contains(step.err, "may have served"):
			t.Fatalf("%s: %v: may have served %v", step.name, err, served(err))
		}
		if got := door.counts(); got != step.counts {
			t.Fatalf("%s: the node got %v (head reads, receipt reads, serves), want %v", step.name, got, step.counts)
		}
	}
	if a.n.Stores.Log.Durable() != 3 || b.n.Stores.Log.Durable() != 1 {
		t.Fatalf("sealed: a %d (want 3), b %d (want 1: only the serve its receipt refused)", a.n.Stores.Log.Durable(), b.n.Stores.Log.Durable())
	}
	// Back under the pinned key: after the doubled backoff it checks and serves.
	urlA := a.srv.URL
	door.target.Store(&urlA)
	now = now.Add(20 * time.Second)
	if err := forward("back under a's key"); err != nil {
		t.Fatal(err)
	}
	if got, want := door.counts(), [3]int{3, 3, 4}; got != want {
		t.Fatalf("the node got %v, want %v", got, want)
	}
}

// BenchmarkKeyCheckCached is the key check's cost once it passed against
// a forwarded serve on loopback, in the same run: median of interleaved
// repetitions. The check adds no request once cached, so the ratio is a
// lock and a flag against a round trip and a receipt verification.
func BenchmarkKeyCheckCached(b *testing.B) {
	const reps, per = 7, 20
	up := startUpstream(b, 10)
	be, err := remote.New(remote.Config{Name: "far", URL: up.srv.URL, Steward: up.n.Key.Public(), Fidelity: 2, UJPerToken: 10})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var fwd, chk []float64
	b.ResetTimer()
	for i := range reps {
		t := time.Now()
		for j := range per {
			p := []byte(fmt.Sprintf("bench %d.%d", i, j))
			if _, err := be.Serve(ctx, wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 4, MaxTokens: 5, FidelityFloor: 2, JouleCeilingUJ: 1e6}, p); err != nil {
				b.Fatal(err)
			}
		}
		fwd = append(fwd, time.Since(t).Seconds()/per)
		t = time.Now()
		for range per * 1000 {
			if err := be.CheckKey(ctx); err != nil {
				b.Fatal(err)
			}
		}
		chk = append(chk, time.Since(t).Seconds()/(per*1000))
	}
	b.StopTimer()
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	f, c := med(fwd), med(chk)
	b.ReportMetric(f*1e6, "µs/forward")
	b.ReportMetric(c*1e9, "ns/cached-check")
	b.ReportMetric(c/f, "check/forward")
}

package remote_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"meshd/agent"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/steward"
	"meshd/wire"
)

// upstream is a meshd node on loopback with one reference backend.
type upstream struct {
	n   *node.Node
	srv *httptest.Server
}

func startNode(t testing.TB, cfgText string) (*node.Node, *httptest.Server) {
	t.Helper()
	st := apitest.Start(t, cfgText, node.Options{})
	return st.Node, st.Server
}

func startUpstream(t testing.TB, ujPerToken int) upstream {
	n, srv := startNode(t, fmt.Sprintf("[[backend]]\nname = \"ref\"\nkind = \"reference\"\nfidelity = 2\nuj_per_token = %d\nwork = 2\n", ujPerToken))
	return upstream{n, srv}
}

func remoteBackend(name string, u upstream, url string, uj int) string {
	return fmt.Sprintf("[[backend]]\nname = %q\nkind = \"meshd\"\nurl = %q\nsteward = %q\nfidelity = 2\nuj_per_token = %d\ntimeout = \"10s\"\n",
		name, url, u.n.Key.ID(), uj)
}

// relay sends r on to the node at base (method, path and query, body,
// credentials) and returns its answer.
func relay(base string, r *http.Request) (int, []byte, error) {
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

func serve(t *testing.T, n *node.Node, prompt string) (*agent.Response, error) {
	p := []byte(prompt)
	req := wire.ServeRequest{PromptHash: wire.ContentOf(p), PromptTokens: 4, MaxTokens: 5, FidelityFloor: 2, JouleCeilingUJ: 1e6}
	return n.Agent.Serve(context.Background(), req, p)
}

// The front door routes to the cheapest sufficient node; its receipt names
// the upstream receipt, which verifies and is for exactly this request,
// and carries the upstream's energy with its provenance.
func TestForwardedServeCarriesUpstreamReceipt(t *testing.T) {
	cheap, dear := startUpstream(t, 10), startUpstream(t, 50)
	front, _ := startNode(t, remoteBackend("cheap", cheap, cheap.srv.URL, 10)+remoteBackend("dear", dear, dear.srv.URL, 50))
	resp, err := serve(t, front, "forward me please")
	if err != nil {
		t.Fatal(err)
	}
	rc := resp.Sealed.Receipt
	if rc.Backend != "cheap" || rc.UpstreamReceipt == nil || *rc.UpstreamSteward != cheap.n.Key.ID() || rc.Recipe != "reference/v1:work=2" {
		t.Fatalf("front receipt: backend %s recipe %s upstream %v", rc.Backend, rc.Recipe, rc.UpstreamReceipt)
	}
	envs, err := cheap.n.Stores.Log.Range(context.Background(), 0, 1)
	if err != nil || len(envs) != 1 {
		t.Fatalf("upstream log: %v", err)
	}
	up, err := steward.OpenEnvelope(envs[0], cheap.n.Key.Public())
	if err != nil || up.ID.String() != *rc.UpstreamReceipt || up.Receipt.RequestID != rc.RequestID {
		t.Fatalf("the named upstream receipt: %v (%s vs %s)", err, up.ID, *rc.UpstreamReceipt)
	}
	ue, _ := up.Receipt.Energy()
	fe, _ := rc.Energy()
	if ue != fe || up.Receipt.EnergyProvenance != rc.EnergyProvenance || rc.TokensOut != up.Receipt.TokensOut {
		t.Fatalf("front energy %v %s, upstream %v %s", fe, rc.EnergyProvenance, ue, up.Receipt.EnergyProvenance)
	}
	if _, err := steward.OpenEnvelope(resp.Sealed.Envelope, front.Key.Public()); err != nil {
		t.Fatalf("front receipt does not verify: %v", err)
	}
}

// A node that dies fails the serve over to the next cheapest node, and
// the receipt says so (cheap failed); the router then passes it over
// (unhealthy) without trying it. Both receipts prove their route.
func TestDeadNodeIsPassedOver(t *testing.T) {
	cheap, dear := startUpstream(t, 10), startUpstream(t, 50)
	front, _ := startNode(t, remoteBackend("cheap", cheap, cheap.srv.URL, 10)+remoteBackend("dear", dear, dear.srv.URL, 50))
	if resp, err := serve(t, front, "first"); err != nil || resp.Sealed.Receipt.Backend != "cheap" {
		t.Fatalf("first serve: %v", err)
	}
	cheap.srv.Close()
	for _, c := range []struct {
		prompt, verdict, reason string
	}{
		{"second", "failed", "failed: remote cheap"},
		{"third", "unhealthy", "unhealthy: remote cheap"},
	} {
		resp, err := serve(t, front, c.prompt)
		if err != nil || resp.Sealed.Receipt.Backend != "dear" || !strings.HasPrefix(resp.Decision.Candidates[0].Reason, c.reason) {
			t.Fatalf("%s serve: %v %+v", c.prompt, err, resp)
		}
		o, err := steward.OpenEnvelope(resp.Sealed.Envelope, front.Key.Public())
		if err != nil {
			t.Fatalf("%s serve's receipt does not verify: %v", c.prompt, err)
		}
		cs, err := o.Receipt.Candidates()
		if err != nil || len(cs) != 2 || string(cs[0].Verdict) != c.verdict || cs[1].Verdict != steward.VerdictAdmissible {
			t.Fatalf("%s serve's x_route_candidates %q: %v", c.prompt, *o.Receipt.RouteCandidates, err)
		}
	}
}

// A node whose receipt does not verify under its pinned key (a tampering
// proxy in between) is refused, and nothing is sealed for it.
func TestTamperedUpstreamReceiptRefused(t *testing.T) {
	up := startUpstream(t, 10)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, data, err := relay(up.srv.URL, r)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		if r.URL.Path != "/v1/serve" {
			w.WriteHeader(status)
			w.Write(data)
			return
		}
		var m map[string]any
		json.Unmarshal(data, &m)
		rc := m["receipt"].(map[string]any)
		env, _ := base64.StdEncoding.DecodeString(rc["envelope"].(string))
		env[len(env)-10] ^= 1
		rc["envelope"] = base64.StdEncoding.EncodeToString(env)
		json.NewEncoder(w).Encode(m)
	}))
	defer proxy.Close()
	front, _ := startNode(t, remoteBackend("via-proxy", up, proxy.URL, 10))
	_, err := serve(t, front, "tamper with me")
	if err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("tampered upstream: %v", err)
	}
	if front.Stores.Log.Durable() != 0 {
		t.Fatal("a receipt was sealed for a tampered upstream")
	}
}

// A forward that fails before the node can have served (no connection, a
// TLS handshake refused, a 503) goes to the next admissible node within
// the same request, and the receipt lists the first as failed; one that
// fails after the node had the whole request (it served and sealed, then
// the answer was lost or did not verify) is never retried elsewhere: the
// serve fails, nothing is sealed at the front door, the next node is not
// called, and the failed node is passed over from the next request on.
func TestFallbackOnlyBeforeTheNodeServed(t *testing.T) {
	// forward relays to u and then answers a serve with what edit makes
	// of the reply (the node's key check it relays untouched).
	forward := func(u upstream, edit func(w http.ResponseWriter, status int, body []byte)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			status, data, err := relay(u.srv.URL, r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			if r.URL.Path != "/v1/serve" {
				w.WriteHeader(status)
				w.Write(data)
				return
			}
			edit(w, status, data)
		}
	}
	for _, c := range []struct {
		name     string
		front    func(t *testing.T, cheap upstream) string // the URL the front door has for cheap
		fallback bool
		says     string
	}{
		{"connection refused", func(t *testing.T, cheap upstream) string {
			s := httptest.NewServer(http.NotFoundHandler())
			s.Close()
			return s.URL
		}, true, "connect: connection refused"},
		{"TLS handshake refused", func(t *testing.T, cheap upstream) string {
			s := httptest.NewTLSServer(forward(cheap, func(w http.ResponseWriter, status int, b []byte) { w.WriteHeader(status); w.Write(b) }))
			t.Cleanup(s.Close)
			return s.URL // a certificate the front door does not trust
		}, true, "certificate"},
		{"503", func(t *testing.T, cheap upstream) string {
			s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"error":{"code":"busy","message":"every serving slot is taken"}}`))
			}))
			t.Cleanup(s.Close)
			return s.URL
		}, true, "HTTP 503 busy"},
		{"served, then 500", func(t *testing.T, cheap upstream) string {
			s := httptest.NewServer(forward(cheap, func(w http.ResponseWriter, _ int, _ []byte) { http.Error(w, "lost", http.StatusInternalServerError) }))
			t.Cleanup(s.Close)
			return s.URL
		}, false, "HTTP 500"},
		{"served, then the connection cut", func(t *testing.T, cheap upstream) string {
			s := httptest.NewServer(forward(cheap, func(w http.ResponseWriter, _ int, _ []byte) {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
			}))
			t.Cleanup(s.Close)
			return s.URL
		}, false, "EOF"},
		{"served, then a receipt that does not verify", func(t *testing.T, cheap upstream) string {
			s := httptest.NewServer(forward(cheap, func(w http.ResponseWriter, status int, b []byte) {
				var m map[string]any
				json.Unmarshal(b, &m)
				rc := m["receipt"].(map[string]any)
				env, _ := base64.StdEncoding.DecodeString(rc["envelope"].(string))
				env[len(env)-10] ^= 1
				rc["envelope"] = base64.StdEncoding.EncodeToString(env)
				json.NewEncoder(w).Encode(m)
			}))
			t.Cleanup(s.Close)
			return s.URL
		}, false, "does not verify"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cheap, dear := startUpstream(t, 10), startUpstream(t, 50)
			front, _ := startNode(t, remoteBackend("cheap", cheap, c.front(t, cheap), 10)+remoteBackend("dear", dear, dear.srv.URL, 50))
			resp, err := serve(t, front, "the first request")
			if c.fallback {
				if err != nil || resp.Sealed.Receipt.Backend != "dear" || !strings.Contains(resp.Decision.Candidates[0].Reason, c.says) {
					t.Fatalf("serve: %v %+v", err, resp)
				}
				o, err := steward.OpenEnvelope(resp.Sealed.Envelope, front.Key.Public())
				if err != nil {
					t.Fatal(err)
				}
				cs, _ := o.Receipt.Candidates()
				if len(cs) != 2 || cs[0].Verdict != steward.VerdictFailed || !strings.Contains(o.Receipt.Route, "after 1 failed") {
					t.Fatalf("the receipt's route %q, candidates %q", o.Receipt.Route, *o.Receipt.RouteCandidates)
				}
				if cheap.n.Stores.Log.Durable() != 0 || dear.n.Stores.Log.Durable() != 1 {
					t.Fatalf("sealed upstream: cheap %d, dear %d", cheap.n.Stores.Log.Durable(), dear.n.Stores.Log.Durable())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "may have served it: not tried elsewhere") {
				t.Fatalf("serve: %v, want a failure saying %q, not retried", err, c.says)
			}
			if front.Stores.Log.Durable() != 0 || dear.n.Stores.Log.Durable() != 0 || cheap.n.Stores.Log.Durable() != 1 {
				t.Fatalf("sealed: front %d, dear %d, cheap %d; want 0, 0, 1 (the node that served)",
					front.Stores.Log.Durable(), dear.n.Stores.Log.Durable(), cheap.n.Stores.Log.Durable())
			}
			// The next request passes the node over.
			resp, err = serve(t, front, "the next request")
			if err != nil || resp.Sealed.Receipt.Backend != "dear" || !strings.HasPrefix(resp.Decision.Candidates[0].Reason, "unhealthy: remote cheap") {
				t.Fatalf("next serve: %v %+v", err, resp)
			}
		})
	}
}

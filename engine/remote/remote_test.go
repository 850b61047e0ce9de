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

func startNode(t *testing.T, cfgText string) (*node.Node, *httptest.Server) {
	t.Helper()
	st := apitest.Start(t, cfgText, node.Options{})
	return st.Node, st.Server
}

func startUpstream(t *testing.T, ujPerToken int) upstream {
	n, srv := startNode(t, fmt.Sprintf("[[backend]]\nname = \"ref\"\nkind = \"reference\"\nfidelity = 2\nuj_per_token = %d\nwork = 2\n", ujPerToken))
	return upstream{n, srv}
}

func remoteBackend(name string, u upstream, url string, uj int) string {
	return fmt.Sprintf("[[backend]]\nname = %q\nkind = \"meshd\"\nurl = %q\nsteward = %q\nfidelity = 2\nuj_per_token = %d\ntimeout = \"10s\"\n",
		name, url, u.n.Key.ID(), uj)
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
		body, _ := io.ReadAll(r.Body)
		resp, err := http.Post(up.srv.URL+r.URL.Path, "application/json", bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
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

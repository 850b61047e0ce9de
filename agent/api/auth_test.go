package api_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/auth"
)

// routeRoles is PROFILE §16's table of who may call what. A route the
// server registers that is missing here fails the test, so no route is
// added without a decision.
var routeRoles = map[string]string{
	"POST /v1/serve":                        "serve",
	"POST /v1/completions":                  "serve",
	"POST /v1/chat/completions":             "serve",
	"POST /v1/embeddings":                   "serve",
	"POST /v1/rag/{org}/{name}/{procedure}": "serve",
	"GET /v1/models":                        "serve read",
	"GET /v1/rag":                           "serve read",
	"GET /v1/receipts":                      "read",
	"GET /v1/receipts/{seq}":                "read",
	"GET /v1/chain/head":                    "read",
	"GET /v1/backends":                      "read",
	"GET /v1/meters":                        "read",
	"GET /v1/node":                          "read",
	"GET /v1/live":                          "read",
	"GET /{$}":                              "read",
	"GET /static/":                          "read",
	"GET /metrics":                          "read",
	"GET /v1/chain/checkpoint":              "operate",
	"POST /v1/meters/idle":                  "operate",
	"POST /v1/runs":                         "operate",
	"POST /v1/runs/{run}/close":             "operate",
	"POST /api/generate":                    "serve",
	"POST /api/chat":                        "serve",
	"POST /api/embed":                       "serve",
	"GET /api/tags":                         "serve read",
	"POST /api/show":                        "serve read",
	"GET /api/version":                      "serve read",
	"GET /healthz":                          "",
	"GET /readyz":                           "",
}

// requestFor is a request on pattern that the route answers without
// error when the caller may call it (4xx where the node has nothing to
// answer with: no corpus, no metered backend, no such run).
func requestFor(t *testing.T, pattern string) *http.Request {
	method, path, _ := strings.Cut(pattern, " ")
	path = strings.NewReplacer("{seq}", "0", "{run}", "999", "{org}", "acme", "{name}", "docs", "{procedure}", "describe_corpus", "{$}", "").Replace(path)
	if path == "/static/" {
		path = "/static/app.js"
	}
	body := map[string]string{
		"/v1/serve":            `{"prompt":"who may","max_tokens":2}`,
		"/v1/completions":      `{"prompt":"who may","max_tokens":2}`,
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"who may"}],"max_tokens":2}`,
		"/v1/meters/idle":      `{"backend":"ref-tiny","seconds":0.01}`,
		"/api/generate":        `{"model":"ref-tiny","prompt":"who may","stream":false,"options":{"num_predict":2}}`,
		"/api/chat":            `{"model":"ref-tiny","messages":[{"role":"user","content":"who may"}],"stream":false,"options":{"num_predict":2}}`,
		"/api/embed":           `{"model":"ref-tiny","input":"who may"}`,
		"/api/show":            `{"model":"ref-tiny"}`,
		"/v1/embeddings":       `{"input":"who may"}`,
	}[path]
	if method == "POST" && body == "" {
		body = "{}"
	}
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// caller is one way of calling: what it presents and over what.
type caller struct {
	name  string
	conn  auth.Conn
	token string
	cert  *x509.Certificate
	roles string // what the policy gives it
	// unauthenticated callers are refused with 401, others with 403.
	anonymous bool
	badToken  bool
}

func selfSigned(t testing.TB, cn string) (*x509.Certificate, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{cn}, IPAddresses: nil, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}
}

func TestEveryRouteEveryRole(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	// A receipt at sequence 0, so GET /v1/receipts/0 and a checkpoint
	// have something to answer with.
	if resp, err := http.Post(st.URL+"/v1/serve", "application/json", strings.NewReader(`{"prompt":"first","max_tokens":2}`)); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first serve: %v %v", err, resp)
	}
	certRead, _ := selfSigned(t, "reader")
	certStranger, _ := selfSigned(t, "stranger")
	fp := auth.Fingerprint(certRead.Raw)
	uid := uint32(4242)
	pol := &auth.Policy{
		Anonymous: auth.Roles(auth.Read), // loopback and the socket: read only
		Tokens: []auth.Token{
			{Name: "s", SHA256: auth.HashToken("tok-serve"), Roles: auth.Roles(auth.Serve)},
			{Name: "r", SHA256: auth.HashToken("tok-read"), Roles: auth.Roles(auth.Read)},
			{Name: "o", SHA256: auth.HashToken("tok-operate"), Roles: auth.Roles(auth.Operate)},
			{Name: "all", SHA256: auth.HashToken("tok-all"), Roles: auth.All},
		},
		Certs: []auth.Cert{{Name: "reader", SHA256: &fp, Roles: auth.Roles(auth.Read)}},
		Peers: []auth.Peer{{Name: "bench", UID: &uid, Roles: auth.Roles(auth.Operate)}},
	}
	var current atomic.Pointer[node.Node]
	current.Store(st.Node)
	guarded := api.New(st.Node, api.Options{Auth: auth.New(pol), Metrics: api.NewMetrics(current.Load)})
	open := api.New(st.Node, api.Options{Metrics: api.NewMetrics(current.Load)})
	t.Cleanup(func() { guarded.Drain(); open.Drain() })

	pub := auth.Conn{Class: auth.Public}
	callers := []caller{
		{name: "anonymous", conn: pub, roles: "", anonymous: true},
		{name: "anonymous-loopback", conn: auth.Conn{Class: auth.Loopback}, roles: "read", anonymous: true},
		{name: "bad-token", conn: pub, token: "tok-wrong", badToken: true},
		{name: "token-serve", conn: pub, token: "tok-serve", roles: "serve"},
		{name: "token-read", conn: pub, token: "tok-read", roles: "read"},
		{name: "token-operate", conn: pub, token: "tok-operate", roles: "operate"},
		{name: "token-all", conn: pub, token: "tok-all", roles: "serve read operate"},
		{name: "cert-read", conn: pub, cert: certRead, roles: "read"},
		{name: "cert-unknown", conn: pub, cert: certStranger, roles: "", anonymous: true},
		{name: "peer-uid", conn: auth.Conn{Class: auth.Unix, Peer: &auth.PeerCred{UID: uid, GID: 1}}, roles: "read operate"},
		{name: "peer-other", conn: auth.Conn{Class: auth.Unix, Peer: &auth.PeerCred{UID: 7, GID: 7}}, roles: "read", anonymous: true},
	}

	// Every registered route is in the table, and nothing else is.
	seen := map[string]bool{}
	for _, rt := range guarded.Routes() {
		want, ok := routeRoles[rt.Pattern]
		if !ok {
			t.Errorf("route %q has no row in PROFILE §16's table (routeRoles)", rt.Pattern)
			continue
		}
		if got := rolesWords(rt.Needs); got != want {
			t.Errorf("route %q needs %q, the table says %q", rt.Pattern, got, want)
		}
		seen[rt.Pattern] = true
	}
	for p := range routeRoles {
		if !seen[p] {
			t.Errorf("the table lists %q, which is not registered", p)
		}
	}

	do := func(h http.Handler, pattern string, c caller) *httptest.ResponseRecorder {
		r := requestFor(t, pattern)
		ctx := auth.WithConn(r.Context(), c.conn)
		if strings.HasSuffix(pattern, "/v1/live") {
			// The stream runs until its caller leaves: leave at once.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			ctx = cctx
		}
		r = r.WithContext(ctx)
		if c.token != "" {
			r.Header.Set("Authorization", "Bearer "+c.token)
		}
		if c.cert != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c.cert}}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, rt := range guarded.Routes() {
		ref := do(open, rt.Pattern, caller{conn: pub})
		if ref.Code == 401 || ref.Code == 403 {
			t.Fatalf("%s without authentication answered %d", rt.Pattern, ref.Code)
		}
		for _, c := range callers {
			t.Run(rt.Pattern+"/"+c.name, func(t *testing.T) {
				w := do(guarded, rt.Pattern, c)
				may := routeRoles[rt.Pattern] == ""
				for _, r := range strings.Fields(routeRoles[rt.Pattern]) {
					may = may || strings.Contains(" "+c.roles+" ", " "+r+" ")
				}
				switch {
				case may && !c.badToken || routeRoles[rt.Pattern] == "":
					if w.Code != ref.Code {
						t.Fatalf("allowed: %d %s, without authentication the route answers %d", w.Code, w.Body, ref.Code)
					}
				case c.anonymous || c.badToken:
					if w.Code != 401 || !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer") {
						t.Fatalf("want 401 with WWW-Authenticate, got %d %q %s", w.Code, w.Header().Get("WWW-Authenticate"), w.Body)
					}
					checkShape(t, rt.Pattern, w.Body.Bytes(), map[bool]string{true: "invalid_api_key", false: "unauthenticated"}[c.badToken])
				default:
					if w.Code != 403 {
						t.Fatalf("want 403, got %d %s", w.Code, w.Body)
					}
					checkShape(t, rt.Pattern, w.Body.Bytes(), "role_required")
				}
			})
		}
		if ref.Code/100 != 2 {
			t.Logf("%-40s answers %d to an allowed caller (nothing to answer with in this node)", rt.Pattern, ref.Code)
		}
	}
}

// checkShape checks an OpenAI-shaped error: message, type, code, param;
// on Ollama's routes, Ollama's shape: the message as "error", and code.
func checkShape(t *testing.T, pattern string, body []byte, code string) {
	t.Helper()
	if strings.Contains(pattern, " /api/") {
		var e map[string]any
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("error body %s: %v", body, err)
		}
		if msg, _ := e["error"].(string); msg == "" || e["code"] != code {
			t.Fatalf("error body %s: want Ollama's {\"error\": message} with code %q", body, code)
		}
		return
	}
	var e map[string]map[string]any
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %s: %v", body, err)
	}
	in := e["error"]
	for _, k := range []string{"message", "type", "code", "param"} {
		if _, ok := in[k]; !ok {
			t.Fatalf("error body %s lacks %q", body, k)
		}
	}
	if in["code"] != code || in["message"] == "" {
		t.Fatalf("error body %s: want code %q", body, code)
	}
}

func rolesWords(rs auth.Roles) string {
	var w []string
	for _, n := range auth.RoleNames() {
		r, _ := auth.ParseRoles([]string{n})
		if rs&r != 0 {
			w = append(w, n)
		}
	}
	return strings.Join(w, " ")
}

// A serve that names a run joins the operator's benchmark tally: serve
// alone does not suffice.
func TestServeNamingRunNeedsOperate(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	pol := &auth.Policy{Tokens: []auth.Token{
		{Name: "s", SHA256: auth.HashToken("s"), Roles: auth.Roles(auth.Serve)},
		{Name: "so", SHA256: auth.HashToken("so"), Roles: auth.Roles(auth.Serve | auth.Operate)},
	}}
	a := api.New(st.Node, api.Options{Auth: auth.New(pol)})
	for _, tc := range []struct {
		tok  string
		want int
	}{{"s", 403}, {"so", 409}} {
		r := httptest.NewRequest("POST", "/v1/serve", bytes.NewReader([]byte(`{"prompt":"x","max_tokens":1,"run":7}`)))
		r.Header.Set("Authorization", "Bearer "+tc.tok)
		w := httptest.NewRecorder()
		a.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("token %s: %d %s, want %d", tc.tok, w.Code, w.Body, tc.want)
		}
	}
}

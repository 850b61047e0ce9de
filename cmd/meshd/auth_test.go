package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/auth"
)

// tokensLine is a tokens-file line granting tok roles.
func tokensLine(tok, name, roles string) string {
	d := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(d[:]) + " " + name + " " + roles + "\n"
}

// call makes one request with an optional bearer token and returns the
// status and body.
func call(t *testing.T, hc *http.Client, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func unixClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// hupAndWait sends SIGHUP and waits until the daemon has handled it.
func hupAndWait(t *testing.T, reloaded <-chan struct{}) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reloaded:
	case <-time.After(30 * time.Second):
		t.Fatal("SIGHUP not handled")
	}
}

// signing is every request that makes the steward sign.
var signing = []struct{ method, path, body string }{
	{"POST", "/v1/serve", `{"prompt":"sign this","max_tokens":2}`},
	{"POST", "/v1/completions", `{"prompt":"sign this","max_tokens":2}`},
	{"POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"sign this"}],"max_tokens":2}`},
	{"GET", "/v1/chain/checkpoint", ""},
	{"POST", "/v1/meters/idle", `{"backend":"ref-tiny","seconds":0.01}`},
	{"POST", "/v1/runs", `{"workload_sha256":"` + strings.Repeat("a", 64) + `","repetitions":1,"serves_declared":1,"harness":"h","caller":"c"}`},
	{"POST", "/v1/runs/0/close", `{}`},
}

// An anonymous caller gets no signature out of the steward, over TCP or
// the socket; a token, reread on SIGHUP, does; a rotated-out token is
// refused.
func TestTokensAndReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(tokensLine("tok-one", "one", "serve,read")), 0o600); err != nil {
		t.Fatal(err)
	}
	reloaded := make(chan struct{}, 1)
	td := startDaemon(t, fmt.Sprintf("[auth]\ntokens_file = %q\n", tokens)+refBackends, serveHooks{reloaded: func() { reloaded <- struct{}{} }})
	sock := unixClient(filepath.Join(td.dir, "meshd.sock"))
	for _, r := range signing {
		for _, via := range []struct {
			hc   *http.Client
			base string
		}{{http.DefaultClient, td.base}, {sock, "http://meshd"}} {
			code, body := call(t, via.hc, r.method, via.base+r.path, "", r.body)
			if code != 401 || !strings.Contains(body, `"code":"unauthenticated"`) {
				t.Errorf("anonymous %s %s via %s: %d %s", r.method, r.path, via.base, code, body)
			}
		}
	}
	if n := td.d.node.Stores.Log.Durable(); n != 0 {
		t.Fatalf("anonymous callers got %d records sealed", n)
	}
	serve := signing[0]
	if code, body := call(t, http.DefaultClient, "POST", td.base+serve.path, "tok-one", serve.body); code != 200 {
		t.Fatalf("serve with token one: %d %s", code, body)
	}
	if code, body := call(t, http.DefaultClient, "GET", td.base+"/v1/chain/checkpoint", "tok-one", ""); code != 403 || !strings.Contains(body, `"code":"role_required"`) {
		t.Fatalf("checkpoint with a serve,read token: %d %s", code, body)
	}
	// Rotate: token two replaces token one.
	if err := os.WriteFile(tokens, []byte(tokensLine("tok-two", "two", "serve,operate")), 0o600); err != nil {
		t.Fatal(err)
	}
	hupAndWait(t, reloaded)
	if code, body := call(t, http.DefaultClient, "POST", td.base+serve.path, "tok-one", serve.body); code != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Fatalf("token one after rotation: %d %s", code, body)
	}
	if code, body := call(t, http.DefaultClient, "GET", td.base+"/v1/chain/checkpoint", "tok-two", ""); code != 200 {
		t.Fatalf("checkpoint with token two: %d %s", code, body)
	}
	// A broken tokens file is refused at reload: token two still works.
	if err := os.WriteFile(tokens, []byte("not a digest line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hupAndWait(t, reloaded)
	if !strings.Contains(td.logs.String(), "reload refused: keeping the running credentials") {
		t.Fatalf("bad tokens file not logged:\n%s", td.logs.String())
	}
	if code, body := call(t, http.DefaultClient, "POST", td.base+serve.path, "tok-two", serve.body); code != 200 {
		t.Fatalf("token two after a refused reload: %d %s", code, body)
	}
}

// The unix socket maps the peer's uid (SO_PEERCRED) to roles.
func TestPeerCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		uid  int
		want int
	}{{"this uid", os.Getuid(), 404}, {"another uid", os.Getuid() + 1, 401}} {
		t.Run(tc.name, func(t *testing.T) {
			td := startDaemon(t, fmt.Sprintf("[auth]\nanonymous = [\"read\"]\n[[auth.peer]]\nname = \"bench\"\nuid = %d\nroles = [\"operate\"]\n", tc.uid)+refBackends, serveHooks{})
			sock := unixClient(filepath.Join(td.dir, "meshd.sock"))
			// A checkpoint of the empty log is 404: the route ran.
			if code, body := call(t, sock, "GET", "http://meshd/v1/chain/checkpoint", "", ""); code != tc.want {
				t.Fatalf("checkpoint over the socket as uid %d (mapped %d): %d %s", os.Getuid(), tc.uid, code, body)
			}
			// The uid counts on the socket only: over TCP the caller is
			// anonymous, with read.
			if code, _ := call(t, http.DefaultClient, "GET", td.base+"/v1/chain/checkpoint", "", ""); code != 401 {
				t.Fatalf("checkpoint over TCP: %d", code)
			}
			if code, _ := call(t, http.DefaultClient, "GET", td.base+"/v1/chain/head", "", ""); code != 200 {
				t.Fatalf("head over TCP as anonymous (read): %d", code)
			}
			c, err := net.Dial("unix", filepath.Join(td.dir, "meshd.sock"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			p, err := auth.PeerOf(c.(*net.UnixConn))
			if err != nil || p.UID != uint32(os.Getuid()) || p.PID != int32(os.Getpid()) {
				t.Fatalf("peer of our own connection: %+v %v", p, err)
			}
		})
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func makeCA(t *testing.T, cn string) testCA {
	k := newKey(t)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCA{c, k}
}

// issue writes a leaf for cn signed by ca (self-signed when ca is nil)
// to dir/name.pem and dir/name.key, returning the paths and its DER.
func issue(t *testing.T, ca *testCA, dir, name, cn string, serial int64) (certPath, keyPath string, der []byte) {
	k := newKey(t)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	parent, signer := tpl, k
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &k.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	certPath, keyPath = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certPath, keyPath, der
}

func writeCA(t *testing.T, ca testCA, path string) {
	os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600)
}

// mTLS: a client certificate chaining to the client CA is mapped by its
// subject, a self-signed one by its pinned fingerprint; one from another
// CA with the same subject, or none at all, is anonymous;
// the server's certificate is reread on SIGHUP.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := makeCA(t, "meshd clients"), makeCA(t, "someone else")
	caPath := filepath.Join(dir, "clients-ca.pem")
	writeCA(t, ca, caPath)
	srvCert, srvKey, srvDER := issue(t, nil, dir, "server", "127.0.0.1", 10)
	readerCert, readerKey, _ := issue(t, &ca, dir, "reader", "bench-01", 11)
	opCert, opKey, opDER := issue(t, nil, dir, "operator", "op", 12)
	strangerCert, strangerKey, _ := issue(t, &other, dir, "stranger", "bench-01", 13)
	opFP := sha256.Sum256(opDER)
	reloaded := make(chan struct{}, 1)
	td := startDaemon(t, fmt.Sprintf(`[listen.tls]
cert_file = %q
key_file = %q
client_ca_file = %q

[auth]
[[auth.cert]]
name = "reader"
subject = "bench-01"
roles = ["read"]
[[auth.cert]]
name = "operator"
sha256 = "%x"
roles = ["operate"]
`, srvCert, srvKey, caPath, opFP)+refBackends, serveHooks{reloaded: func() { reloaded <- struct{}{} }})
	base := "https://" + td.d.addrs[0].String()
	client := func(cert, key, pin string) *http.Client {
		tc, err := auth.ClientTLS(auth.ClientFiles{ServerSHA256: pin, CertFile: cert, KeyFile: key})
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	pin := fmt.Sprintf("%x", sha256.Sum256(srvDER))
	for _, tc := range []struct {
		name      string
		hc        *http.Client
		path      string
		want      int
		handshake bool // refused before HTTP
	}{
		{"reader reads", client(readerCert, readerKey, pin), "/v1/chain/head", 200, false},
		{"reader may not operate", client(readerCert, readerKey, pin), "/v1/chain/checkpoint", 403, false},
		{"pinned operator operates", client(opCert, opKey, pin), "/v1/chain/checkpoint", 404, false},
		{"no certificate is anonymous", client("", "", pin), "/v1/chain/head", 401, false},
		// Same subject, another issuer: it maps to nothing.
		{"another CA gets no role", client(strangerCert, strangerKey, pin), "/v1/chain/head", 401, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", base+tc.path, nil)
			resp, err := tc.hc.Do(req)
			if tc.handshake {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("a certificate of another CA got HTTP %d", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	// Plain HTTP on the TLS port gets nothing.
	if resp, err := http.Get("http://" + td.d.addrs[0].String() + "/v1/chain/head"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP answered on the TLS listener")
		}
	}
	// A wrong pin is refused by the client.
	if _, err := client(readerCert, readerKey, strings.Repeat("0", 64)).Get(base + "/v1/chain/head"); err == nil || !strings.Contains(err.Error(), "not the pinned one") {
		t.Fatalf("wrong pin: %v", err)
	}
	// A new server certificate in the same files, reread on SIGHUP.
	_, _, newDER := issue(t, nil, dir, "server", "127.0.0.1", 99)
	hupAndWait(t, reloaded)
	newPin := fmt.Sprintf("%x", sha256.Sum256(newDER))
	if resp, err := client(readerCert, readerKey, newPin).Get(base + "/v1/chain/head"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after SIGHUP the new certificate: %v %v", err, resp)
	}
}

// check-config refuses a listener on every interface without TLS and
// authentication, naming the line and the key.
func TestCheckConfigRefusesPublicClearText(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "meshd.toml")
	doc := fmt.Sprintf("[steward]\nstate_dir = %q\n[listen]\ntcp = [\"0.0.0.0:8477\"]\n", dir) + refBackends
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	err := checkConfig([]string{"-config", path}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), path+":4:") || !strings.Contains(err.Error(), `listen.tcp[0]: "0.0.0.0:8477" is reachable beyond loopback`) {
		t.Fatalf("check-config: %v", err)
	}
}

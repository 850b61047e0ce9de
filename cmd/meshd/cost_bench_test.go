package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"meshd/agent"
	"meshd/auth"
	"meshd/engine/runner/gguf"
	"meshd/engine/subprocess"
	"meshd/internal/testbin"
	"meshd/steward"
)

// BenchmarkDaemonCostPerServe is the daemon's own cost per serve in front
// of a real engine child: the mesh-gguf runner on a small synthesised
// GGUF. Each pair is the same serve twice, once through the in-process
// daemon (HTTP, keep-alive, the whole stack: admission, routing, the
// adapter's hop to the child, sealing with its fsync) and once straight
// to the child (the same /completion body the adapter posts, on a
// keep-alive connection of its own), the order alternating; the cost is
// the median of the per-pair differences, so the engine's own time and
// the machine's drift cancel.
//
// Where it goes, from the agent's phase timings of the same serves
// (agent.Phases, and the steward's steward.SealTimes within the seal) and
// a bare write+fdatasync of a receipt-sized frame beside the state dir
// (into a file written with zeros ahead, as the log preallocates its
// segment), interleaved with the pairs:
//   - http+json: the daemon's reply time less the agent's (the HTTP
//     client and server, JSON in and out, the receipt's encoding in the
//     reply);
//   - admit, grant+hold, route, settle: the agent's phases;
//   - hop to the engine: the engine phase less the paired direct call
//     (the slot, the adapter's request and response, its checks);
//   - seal: build (the receipt and its CBOR), sign (Ed25519), append (the
//     frame's write), fsync (the log's own), and the rest of the seal
//     phase (nonce, the log's lock, the chain's bookkeeping);
//   - the bare write+fdatasync: what the disk alone takes for a durable
//     frame, the floor under the log's fsync;
//   - a bare HTTP round trip to the daemon (GET /healthz), for
//     scale: http+json holds the client's side of the exchange too (the
//     direct call's own client side, subtracted from the hop, balances
//     it in the cost); and GET /v1/chain/head beside it, which should
//     cost little more.
//
// Reported: cost-median-µs (target ≤ 500), direct-median-µs,
// fsync-median-µs (the bare baseline) and cost-less-fsync-median-µs: the
// median over pairs of the cost less the baseline fsync measured right
// after it, the daemon's own cost with the disk taken out; and
// cost-at-0.11ms-fsync-µs, that plus the 0.11 ms fsync the target is
// stated for, printed as a projection. A loaded
// machine's disk alone can pass the target; the verdict is the raw
// figure's, the rest says why.
// targetFsync is the fsync the per-serve target is stated for.
const targetFsync = 110 * time.Microsecond

func BenchmarkDaemonCostPerServe(b *testing.B) {
	d, child, lastEvent := ggufDaemon(b, "")
	base := "http://" + d.addrs[0].String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer hc.CloseIdleConnections()
	defer direct.CloseIdleConnections()
	const maxTokens = 4

	post := func(c *http.Client, url string, body []byte, want string) time.Duration {
		return timedPost(b, c, url, body, want)
	}
	// viaDaemon returns the serve's time at the client, the time from the
	// agent's end of it to the reply's arrival, and its phases.
	viaDaemon := func(prompt string) (time.Duration, time.Duration, agent.Phases, steward.SealTimes) {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
		el := post(hc, base+"/v1/serve", body, `"envelope":`)
		end := time.Now()
		last := lastEvent()
		if last.Sealed == nil {
			b.Fatalf("the serve's event: %+v", last.Event)
		}
		return el, end.Sub(last.at), last.Phases, last.Sealed.Took
	}
	// The body the adapter posts (engine/subprocess completionRequest).
	straight := func(prompt string) time.Duration {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": maxTokens, "cache_prompt": true,
			"temperature": 0, "seed": 0, "return_tokens": true})
		return post(direct, child+"/completion", body, `"tokens_predicted"`)
	}
	sf, err := os.OpenFile(filepath.Join(b.TempDir(), "fsync-probe"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	// The probe writes as the log does: into a file already written with
	// zeros (steward.DefaultPreallocate), so that its fdatasync, like the
	// log's, need not grow the file.
	if _, err := sf.Write(make([]byte, steward.DefaultPreallocate)); err != nil {
		b.Fatal(err)
	}
	if err := sf.Sync(); err != nil {
		b.Fatal(err)
	}
	var probeAt int64
	frame := make([]byte, 830) // a receipt's bytes in the log
	fsync := func() time.Duration {
		if probeAt+int64(len(frame)) > steward.DefaultPreallocate {
			probeAt = 0
		}
		t0 := time.Now()
		if _, err := sf.WriteAt(frame, probeAt); err != nil {
			b.Fatal(err)
		}
		probeAt += int64(len(frame))
		if err := syscall.Fdatasync(int(sf.Fd())); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	// roundTrip is a bare HTTP exchange with the daemon on the same
	// client: GET /healthz, a small JSON answer. Most of
	// http+json is this.
	roundTrip := func(path string) time.Duration {
		t0 := time.Now()
		resp, err := hc.Get(base + path)
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %v %d", path, err, resp.StatusCode)
		}
		return time.Since(t0)
	}
	prompt := func(i int) string { return fmt.Sprintf("the quick brown fox %d", i) }
	for i := range 20 { // warm up: connections, the child's caches, the log
		viaDaemon(prompt(i))
		straight(prompt(i))
	}

	n := max(b.N, 30)
	var cost, lessFsync, directs, syncs, trips, heads []time.Duration
	rows := make([][]time.Duration, len(costRows))
	b.ResetTimer()
	for i := range n {
		p := prompt(1000 + i)
		var dt, out, st time.Duration
		var ph agent.Phases
		var sk steward.SealTimes
		if i%2 == 0 {
			dt, out, ph, sk = viaDaemon(p)
			st = straight(p)
		} else {
			st = straight(p)
			dt, out, ph, sk = viaDaemon(p)
		}
		fs := fsync()
		rt := roundTrip("/healthz")
		heads = append(heads, roundTrip("/v1/chain/head"))
		inAgent := ph.Admit + ph.Grant + ph.Route + ph.Engine + ph.Seal + ph.Settle
		cost, directs, syncs, trips = append(cost, dt-st), append(directs, st), append(syncs, fs), append(trips, rt)
		lessFsync = append(lessFsync, dt-st-fs)
		for j, v := range []time.Duration{dt - inAgent, dt - inAgent - out, out, ph.Admit, ph.Grant, ph.Route, ph.Engine - st,
			sk.Build, sk.Sign, sk.Write, sk.Fsync, ph.Seal - sk.Build - sk.Sign - sk.Write - sk.Fsync, ph.Settle} {
			rows[j] = append(rows[j], v)
		}
	}
	b.StopTimer()

	med := func(xs []time.Duration) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return percentile(s, 0.5)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	c, fs := med(cost), med(syncs)
	b.ReportMetric(us(c), "cost-median-µs")
	b.ReportMetric(us(med(directs)), "direct-median-µs")
	b.ReportMetric(us(fs), "fsync-median-µs")
	b.ReportMetric(us(med(lessFsync)), "cost-less-fsync-median-µs")
	var sb strings.Builder
	verdict := "met"
	if c > 500*time.Microsecond {
		verdict = "NOT met"
	}
	fmt.Fprintf(&sb, "daemon cost per serve in front of mesh-gguf over %d pairs: median %.0f µs (direct %.0f µs); target ≤ 500 µs: %s\n",
		n, us(c), us(med(directs)), verdict)
	fmt.Fprintf(&sb, "  a bare write+fdatasync of a receipt-sized frame here: %.0f µs; the cost less it (median over pairs): %.0f µs\n",
		us(fs), us(med(lessFsync)))
	// The target is stated for a disk whose fsync takes 0.11 ms; on
	// another disk the figure to hold against it is the cost less this
	// disk's own fsync plus that one. A projection, named as such: the
	// verdict above stays the raw figure's.
	proj := med(lessFsync) + targetFsync
	projVerdict := "met"
	if proj > 500*time.Microsecond {
		projVerdict = "NOT met"
	}
	b.ReportMetric(us(proj), "cost-at-0.11ms-fsync-µs")
	fmt.Fprintf(&sb, "  projected on a disk whose fsync takes %.0f µs: %.0f µs; target ≤ 500 µs there: %s (projection)\n",
		us(targetFsync), us(proj), projVerdict)
	fmt.Fprintf(&sb, "  a bare HTTP round trip to the daemon on the same client (GET /healthz): %.0f µs; GET /v1/chain/head: %.0f µs\n", us(med(trips)), us(med(heads)))
	for j, name := range costRows {
		fmt.Fprintf(&sb, "  %-28s %7.1f µs\n", name, us(med(rows[j])))
	}
	fmt.Fprintf(&sb, "  (rows are medians of their own; they need not add up to the median cost)\n")
	// Printed, not logged: go test cuts a benchmark's log to a few lines.
	// go test's first round (b.N = 1) is calibration, not worth a table.
	if b.N > 1 {
		fmt.Print(sb.String())
	}
}

// timedPost posts body as JSON to url on c and returns how long the whole
// answer took, failing b unless it is a 200 that contains want.
func timedPost(b *testing.B, c *http.Client, url string, body []byte, want string) time.Duration {
	b.Helper()
	t0 := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	el := time.Since(t0)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(want)) {
		b.Fatalf("%s: %v %d %s", url, err, resp.StatusCode, data)
	}
	return el
}

// costRows name the breakdown's rows, in the order they are measured.
var costRows = []string{"http+json", "  in (request to the agent)", "  out (reply to the client)", "admit", "grant+hold", "route", "hop to the engine",
	"seal: build (receipt, CBOR)", "seal: sign (Ed25519)", "seal: append (write)", "seal: fsync (the log's)", "seal: rest", "settle"}

// ggufDaemon starts a daemon (with extra config) in front of a mesh-gguf
// child on a small synthesised GGUF, returning it, the child's URL and
// the last serve's event.
func ggufDaemon(b *testing.B, extra string) (*daemon, string, func() lastServe) {
	runner := testbin.Build(b, "meshd/cmd/mesh-gguf")
	model := filepath.Join(b.TempDir(), "tiny.gguf")
	f, err := os.Create(model)
	if err != nil {
		b.Fatal(err)
	}
	if err := gguf.Synth(f, gguf.Shape{Layers: 2, Dim: 64, Heads: 4, KVHeads: 2, FF: 128, Vocab: 320, Ctx: 256, Type: gguf.F32}, 7); err != nil {
		b.Fatal(err)
	}
	f.Close()
	var mu sync.Mutex
	var last lastServe
	hooks := serveHooks{}
	hooks.opts.Observe = func(ev agent.Event) {
		at := time.Now()
		mu.Lock()
		last = lastServe{ev, at}
		mu.Unlock()
	}
	d := benchDaemonWith(b, fmt.Sprintf(`
[[backend]]
name = "gguf"
kind = "mesh-gguf"
runner = %q
model = %q
context = 256
threads = 1
fidelity = 1
uj_per_token = 40
%s`, runner, model, extra), hooks)
	var child string
	for _, bk := range d.node.Backends() {
		if e, ok := bk.Engine.(*subprocess.Engine); ok {
			child = e.URL()
		}
	}
	if child == "" {
		b.Fatal("no engine child")
	}
	return d, child, func() lastServe {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// lastServe is a serve's event and when the agent told it, at the end of
// the serve, before the handler writes the reply.
type lastServe struct {
	agent.Event
	at time.Time
}

// BenchmarkAuthCostPerServe is what authentication adds to a serve, set
// against the daemon's own cost per serve measured in the same run. Two
// daemons in front of mesh-gguf children, their loopback listeners open
// to anonymous callers and taking credentials too: a plain one with a
// bearer token among several, and one speaking TLS that maps a client
// certificate. Each round is three pairs of the same serve: anonymous and
// with the token on the first daemon, anonymous and with the certificate
// on the second (each caller on its own keep-alive connection, so no
// handshake is timed), and the first daemon's serve against its child
// directly; each pair after a direct call, its order alternating.
// Reported: the medians of the per-round differences and their share of
// the daemon's cost (goal < 5 %).
func BenchmarkAuthCostPerServe(b *testing.B) {
	const token = "mshd_bench-token"
	var tokens strings.Builder
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		h := auth.HashToken("other-" + n)
		fmt.Fprintf(&tokens, "[[auth.token]]\nname = %q\nsha256 = \"%x\"\nroles = [\"serve\"]\n", n, h[:])
	}
	h := auth.HashToken(token)
	fmt.Fprintf(&tokens, "[[auth.token]]\nname = \"bench\"\nsha256 = \"%x\"\nroles = [\"serve\"]\n", h[:])
	plain, child, _ := ggufDaemon(b, "\n[auth]\nanonymous = [\"serve\", \"read\", \"operate\"]\n"+tokens.String())

	dir := b.TempDir()
	ca := benchCert(b, nil, "meshd clients")
	srv := benchCert(b, &ca, "127.0.0.1")
	cli := benchCert(b, &ca, "bench-01")
	files := map[string][]byte{"ca.pem": ca.certPEM, "server.pem": srv.certPEM, "server.key": srv.keyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	tlsd, _, _ := ggufDaemon(b, fmt.Sprintf(`
[listen.tls]
cert_file = %q
key_file = %q
client_ca_file = %q

[auth]
anonymous = ["serve", "read", "operate"]
[[auth.cert]]
name = "bench"
subject = "bench-01"
roles = ["serve"]
`, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem")))

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cliCert, err := tls.X509KeyPair(cli.certPEM, cli.keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	client := func(tc *tls.Config) *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: tc}}
	}
	anon, withToken, direct := client(nil), client(nil), client(nil)
	tlsAnon := client(&tls.Config{RootCAs: roots})
	tlsCert := client(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cliCert}})
	for _, c := range []*http.Client{anon, withToken, direct, tlsAnon, tlsCert} {
		defer c.CloseIdleConnections()
	}
	plainURL, tlsURL := "http://"+plain.addrs[0].String(), "https://"+tlsd.addrs[0].String()
	const maxTokens = 4
	post := func(c *http.Client, url, bearer string, body []byte, want string) time.Duration {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		t0 := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		el := time.Since(t0)
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(data, []byte(want)) {
			b.Fatalf("%s: %v %d %s", url, err, resp.StatusCode, data)
		}
		return el
	}
	serve := func(c *http.Client, base, bearer, prompt string) time.Duration {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": maxTokens})
		return post(c, base+"/v1/serve", bearer, body, `"envelope":`)
	}
	straight := func(prompt string) time.Duration {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "n_predict": maxTokens, "cache_prompt": true,
			"temperature": 0, "seed": 0, "return_tokens": true})
		return post(direct, child+"/completion", "", body, `"tokens_predicted"`)
	}
	anonPlain := func(p string) time.Duration { return serve(anon, plainURL, "", p) }
	tokPlain := func(p string) time.Duration { return serve(withToken, plainURL, token, p) }
	anonTLS := func(p string) time.Duration { return serve(tlsAnon, tlsURL, "", p) }
	certTLS := func(p string) time.Duration { return serve(tlsCert, tlsURL, "", p) }
	// pair runs x and y back to back, y first when flip: the second of
	// two serves on one daemon follows the first's fsync, so each side
	// takes each place equally often, and a direct call before the pair
	// (no fsync) makes what precedes its first alike.
	pair := func(x, y func(string) time.Duration, p string, flip bool) (tx, ty time.Duration) {
		straight(p)
		if flip {
			ty = y(p)
			return x(p), ty
		}
		tx = x(p)
		return tx, y(p)
	}
	for i := range 10 { // warm up: connections and handshakes, the children's caches
		w := fmt.Sprintf("warm %d", i)
		pair(anonPlain, tokPlain, w, false)
		pair(anonTLS, certTLS, w, false)
	}
	n := max(b.N, 30)
	var tokD, certD, cost []time.Duration
	b.ResetTimer()
	for i := range n {
		p := fmt.Sprintf("the quick brown fox %d", 1000+i)
		flip := i%2 == 1
		ta, tt := pair(anonPlain, tokPlain, p, flip)
		tn, tc := pair(anonTLS, certTLS, p, flip)
		tv, td := pair(anonPlain, straight, p, flip)
		tokD, certD, cost = append(tokD, tt-ta), append(certD, tc-tn), append(cost, tv-td)
	}
	b.StopTimer()
	med := func(xs []time.Duration) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return percentile(s, 0.5)
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	// A median's standard error, from the spread (the interquartile range
	// over 1.349 is σ for a normal spread): the rounds' noise, mostly the
	// disk's, is far larger than a credential check.
	se := func(xs []time.Duration) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		sigma := float64(percentile(s, 0.75)-percentile(s, 0.25)) / 1.349
		return 1.2533 * sigma / math.Sqrt(float64(len(s))) / float64(time.Microsecond)
	}
	tk, ct, c := med(tokD), med(certD), med(cost)
	share := func(d time.Duration) float64 { return 100 * float64(d) / float64(c) }
	b.ReportMetric(us(tk), "token-µs")
	b.ReportMetric(us(ct), "mtls-µs")
	b.ReportMetric(us(c), "cost-median-µs")
	b.ReportMetric(share(max(tk, ct)), "%auth/cost")
	verdict := "met"
	if share(max(tk, ct)) >= 5 {
		verdict = "NOT met"
	}
	if b.N > 1 {
		fmt.Printf("authentication per serve over %d interleaved rounds (keep-alive): bearer token %+.1f ± %.1f µs, mTLS %+.1f ± %.1f µs (medians ± their standard error); the daemon's cost per serve in the same run %.0f µs: %.1f %% and %.1f %% of it; goal < 5 %%: %s\n",
			n, us(tk), se(tokD), us(ct), se(certD), us(c), share(tk), share(ct), verdict)
	}
}

// benchKey is a certificate and its key, PEM-encoded, and the parsed
// certificate (for a CA).
type benchKey struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

// benchCert issues a certificate for cn (an IP address or a name) signed
// by ca, or a CA of its own when ca is nil.
func benchCert(b *testing.B, ca *benchKey, cn string) benchKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	parent, signer := tpl, k
	if ca == nil {
		tpl.IsCA, tpl.BasicConstraintsValid, tpl.KeyUsage = true, true, x509.KeyUsageCertSign
	} else {
		tpl.KeyUsage = x509.KeyUsageDigitalSignature
		tpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		if ip := net.ParseIP(cn); ip != nil {
			tpl.IPAddresses = []net.IP{ip}
		} else {
			tpl.DNSNames = []string{cn}
		}
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &k.PublicKey, signer)
	if err != nil {
		b.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(k)
	return benchKey{cert: c, key: k, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}
}

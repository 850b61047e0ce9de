package api_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/auth"
)

// BenchmarkAuthOverhead is what authentication adds to a request on
// keep-alive connections: the same route (GET /v1/models) on the
// same node behind a server without authentication and one with it, by
// bearer token over HTTP and by client certificate over TLS (whose
// baseline is TLS without authentication, the client sending the same
// certificate), in interleaved rounds; the figure is the median of the
// rounds' differences. It is set against a serve through the same API
// (reference engine: routing, hold, seal, append, fsync), measured in
// the same run, and against the 0.5 ms the daemon's own cost per serve
// is to stay under: authentication is to cost under 5 % of it.
func BenchmarkAuthOverhead(b *testing.B) {
	const rounds, perRound, serves = 15, 200, 10
	st := apitest.Start(b, apitest.RefBackends, node.Options{})
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "bench-01"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafTpl, ca, &leafKey.PublicKey, caKey)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	// Tokens as a deployment has a few of: the one presented is last.
	pol := &auth.Policy{ClientCAs: pool, Certs: []auth.Cert{{Name: "bench", Subject: "bench-01", Roles: auth.All}}}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		pol.Tokens = append(pol.Tokens, auth.Token{Name: n, SHA256: auth.HashToken("other-" + n), Roles: auth.All})
	}
	pol.Tokens = append(pol.Tokens, auth.Token{Name: "bench", SHA256: auth.HashToken("mshd_bench-token"), Roles: auth.All})
	authn := auth.New(pol)

	start := func(a *api.Server, withTLS bool) (*httptest.Server, *http.Client) {
		hs := httptest.NewUnstartedServer(a)
		hs.Config.ConnContext = auth.ConnContext(auth.Public)
		if !withTLS {
			hs.Start()
			b.Cleanup(hs.Close)
			return hs, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		}
		hs.EnableHTTP2 = false
		// As auth.ServerTLS asks: a certificate requested, judged by the policy.
		hs.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
		hs.StartTLS()
		b.Cleanup(hs.Close)
		cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}
		tr := &http.Transport{MaxIdleConnsPerHost: 1, TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}}
		return hs, &http.Client{Transport: tr}
	}
	open := api.New(st.Node, api.Options{})
	guarded := api.New(st.Node, api.Options{Auth: authn})
	b.Cleanup(func() { open.Drain(); guarded.Drain() })
	plainOpen, plainOpenC := start(open, false)
	plainAuth, plainAuthC := start(guarded, false)
	tlsOpen, tlsOpenC := start(open, true)
	tlsAuth, tlsAuthC := start(guarded, true)

	get := func(c *http.Client, url, token string) {
		req, _ := http.NewRequest("GET", url+"/v1/models", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: HTTP %d", url, resp.StatusCode)
		}
	}
	per := func(f func()) float64 {
		t := time.Now()
		for range perRound {
			f()
		}
		return float64(time.Since(t).Nanoseconds()) / perRound
	}
	serve := func() float64 {
		t := time.Now()
		for range serves {
			resp, err := http.Post(plainOpen.URL+"/v1/serve", "application/json", strings.NewReader(`{"prompt":"what does a serve cost","max_tokens":4}`))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return float64(time.Since(t).Nanoseconds()) / serves
	}
	// Warm every connection (and the TLS handshakes) first.
	get(plainOpenC, plainOpen.URL, "")
	get(plainAuthC, plainAuth.URL, "mshd_bench-token")
	get(tlsOpenC, tlsOpen.URL, "")
	get(tlsAuthC, tlsAuth.URL, "")

	var tokenD, mtlsD, serveNs, baseNs []float64
	b.ResetTimer()
	for i := range rounds {
		var none, tok, tnone, tcert float64
		// Alternate the order so drift favours neither side.
		if i%2 == 0 {
			none = per(func() { get(plainOpenC, plainOpen.URL, "") })
			tok = per(func() { get(plainAuthC, plainAuth.URL, "mshd_bench-token") })
			tnone = per(func() { get(tlsOpenC, tlsOpen.URL, "") })
			tcert = per(func() { get(tlsAuthC, tlsAuth.URL, "") })
		} else {
			tcert = per(func() { get(tlsAuthC, tlsAuth.URL, "") })
			tnone = per(func() { get(tlsOpenC, tlsOpen.URL, "") })
			tok = per(func() { get(plainAuthC, plainAuth.URL, "mshd_bench-token") })
			none = per(func() { get(plainOpenC, plainOpen.URL, "") })
		}
		tokenD = append(tokenD, tok-none)
		mtlsD = append(mtlsD, tcert-tnone)
		baseNs = append(baseNs, none)
		serveNs = append(serveNs, serve())
	}
	b.StopTimer()
	med := func(x []float64) float64 { sort.Float64s(x); return x[len(x)/2] }
	tokNs, mtlsNs, srvNs, reqNs := med(tokenD), med(mtlsD), med(serveNs), med(baseNs)
	const targetNs = 500_000
	b.ReportMetric(reqNs/1e3, "µs/request-no-auth")
	b.ReportMetric(tokNs/1e3, "µs/token")
	b.ReportMetric(mtlsNs/1e3, "µs/mtls")
	b.ReportMetric(srvNs/1e3, "µs/serve")
	b.ReportMetric(100*max(tokNs, mtlsNs)/srvNs, "%auth/serve")
	b.ReportMetric(100*max(tokNs, mtlsNs)/targetNs, "%auth/0.5ms")
	b.Logf("authentication per request (median of %d interleaved rounds of %d requests, keep-alive): bearer token %+.1f µs, mTLS %+.1f µs over a %.1f µs request; a serve through the API %.0f µs: %.2f %% of it, %.2f %% of the 0.5 ms target (goal < 5 %%)",
		rounds, perRound, tokNs/1e3, mtlsNs/1e3, reqNs/1e3, srvNs/1e3, 100*max(tokNs, mtlsNs)/srvNs, 100*max(tokNs, mtlsNs)/targetNs)
}

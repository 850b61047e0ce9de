package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func leafOf(tb testing.TB, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, notAfter time.Time) *x509.Certificate {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &k.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

func newCA(tb testing.TB) (*x509.Certificate, *ecdsa.PrivateKey) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tpl, tpl, &k.PublicKey, k)
	c, _ := x509.ParseCertificate(der)
	return c, k
}

func TestIdentify(t *testing.T) {
	ca, caKey := newCA(t)
	other, otherKey := newCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	good := leafOf(t, "bench-01", ca, caKey, time.Now().Add(time.Hour))
	foreign := leafOf(t, "bench-01", other, otherKey, time.Now().Add(time.Hour))
	expired := leafOf(t, "bench-01", ca, caKey, time.Now().Add(-time.Hour))
	fp := Fingerprint(foreign.Raw)
	uid := uint32(7)
	p := &Policy{Anonymous: Roles(Read), ClientCAs: pool,
		Tokens: []Token{{Name: "s", SHA256: HashToken("tok-s"), Roles: Roles(Serve)}},
		Certs:  []Cert{{Name: "subj", Subject: "bench-01", Roles: Roles(Read)}, {Name: "pin", SHA256: &fp, Roles: Roles(Operate)}},
		Peers:  []Peer{{Name: "u", UID: &uid, Roles: Roles(Operate)}}}
	a := New(p)
	for _, tc := range []struct {
		name  string
		conn  Conn
		auth  string
		cert  *x509.Certificate
		roles Roles
		bad   bool
		authd bool
	}{
		{"public anonymous", Conn{Class: Public}, "", nil, 0, false, false},
		{"loopback anonymous", Conn{Class: Loopback}, "", nil, Roles(Read), false, false},
		{"token", Conn{Class: Public}, "Bearer tok-s", nil, Roles(Serve), false, true},
		{"token, any case of the scheme", Conn{Class: Public}, "bearer tok-s", nil, Roles(Serve), false, true},
		{"wrong token", Conn{Class: Loopback}, "Bearer tok-x", nil, Roles(Read), true, false},
		{"basic is not a token", Conn{Class: Public}, "Basic dG9rLXM=", nil, 0, false, false},
		{"cert by subject", Conn{Class: Public}, "", good, Roles(Read), false, true},
		{"same subject, other CA, pinned", Conn{Class: Public}, "", foreign, Roles(Operate), false, true},
		{"expired", Conn{Class: Public}, "", expired, 0, false, false},
		{"peer uid", Conn{Class: Unix, Peer: &PeerCred{UID: 7, GID: 100}}, "", nil, Roles(Read | Operate), false, true},
		{"peer unknown", Conn{Class: Unix, Peer: &PeerCred{UID: 8, GID: 100}}, "", nil, Roles(Read), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r = r.WithContext(WithConn(r.Context(), tc.conn))
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.cert != nil {
				r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{tc.cert}}
			}
			for range 2 { // the second time through the chain cache
				id := a.Identify(r)
				if id.Roles != tc.roles || id.BadToken != tc.bad || id.Authenticated() != tc.authd {
					t.Fatalf("%+v: roles %v bad %v authenticated %v", id, id.Roles, id.BadToken, id.Authenticated())
				}
			}
		})
	}
	// No tokens configured: Authorization is not read at all.
	a.Set(&Policy{Anonymous: All})
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer sk-placeholder")
	if id := a.Identify(r.WithContext(WithConn(r.Context(), Conn{Class: Loopback}))); id.BadToken || id.Roles != All {
		t.Fatalf("placeholder key without tokens: %+v", id)
	}
}

func TestLoopbackHost(t *testing.T) {
	for h, want := range map[string]bool{"127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true, "localhost": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.7": false, "board.local": false} {
		if IsLoopbackHost(h) != want {
			t.Errorf("IsLoopbackHost(%q) = %v", h, !want)
		}
	}
}

// BenchmarkIdentify is the per-request cost of recognising a caller, in
// process: a token among eight, a certificate mapped by subject (its
// chain verified once, then cached), a unix peer.
func BenchmarkIdentify(b *testing.B) {
	ca, caKey := newCA(b)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := leafOf(b, "bench-01", ca, caKey, time.Now().Add(time.Hour))
	uid := uint32(7)
	p := &Policy{ClientCAs: pool, Certs: []Cert{{Name: "c", Subject: "bench-01", Roles: All}}, Peers: []Peer{{Name: "u", UID: &uid, Roles: All}}}
	for i := range 8 {
		p.Tokens = append(p.Tokens, Token{Name: "t", SHA256: HashToken(string(rune('a' + i))), Roles: All})
	}
	a := New(p)
	for _, tc := range []struct {
		name string
		set  func(*http.Request)
	}{
		{"token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer h") }},
		{"cert", func(r *http.Request) { r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}} }},
		{"peer", func(r *http.Request) {
			*r = *r.WithContext(WithConn(r.Context(), Conn{Class: Unix, Peer: &PeerCred{UID: 7}}))
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/", nil)
			tc.set(r)
			for b.Loop() {
				if a.Identify(r).Roles != All {
					b.Fatal("not recognised")
				}
			}
		})
	}
}

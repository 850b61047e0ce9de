// Package auth decides who may do what on a node: the roles a request
// needs, the credentials that carry them (bearer tokens stored as SHA-256
// digests, TLS client certificates, the uid and gid of a unix-socket peer)
// and the TLS configurations of the server and of the clients that call
// it. It knows nothing of receipts or routes: the API names the role each
// route needs and asks Identify who is calling.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Role is one thing a caller may do.
type Role uint8

// The roles. Serve spends energy (mesh/1 serves, OpenAI calls, RAG
// queries); Read reads what the node has sealed and measured; Operate
// makes the steward sign a record of the caller's choosing or holds a
// meter (checkpoints, idle windows, runs).
const (
	Serve Role = 1 << iota
	Read
	Operate
)

// Roles is a set of roles.
type Roles uint8

// All is every role.
const All = Roles(Serve | Read | Operate)

var roleNames = []struct {
	r    Role
	name string
}{{Serve, "serve"}, {Read, "read"}, {Operate, "operate"}}

// RoleNames lists the role names in their order.
func RoleNames() []string { return []string{"serve", "read", "operate"} }

// String names r.
func (r Role) String() string {
	for _, n := range roleNames {
		if n.r == r {
			return n.name
		}
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRoles reads role names; an unknown name is an error naming it.
func ParseRoles(names []string) (Roles, error) {
	var rs Roles
	for _, s := range names {
		i := slices.IndexFunc(roleNames, func(n struct {
			r    Role
			name string
		}) bool {
			return n.name == s
		})
		if i < 0 {
			return 0, fmt.Errorf("unknown role %q: want serve, read or operate", s)
		}
		rs |= Roles(roleNames[i].r)
	}
	return rs, nil
}

// Has reports whether rs holds r.
func (rs Roles) Has(r Role) bool { return rs&Roles(r) != 0 }

// String lists the roles, "none" for the empty set.
func (rs Roles) String() string {
	var s []string
	for _, n := range roleNames {
		if rs.Has(n.r) {
			s = append(s, n.name)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// Class is what kind of listener accepted a connection: it decides what
// a caller without credentials may do.
type Class uint8

const (
	// Public is a TCP listener beyond loopback (or a connection of unknown
	// origin): a caller without credentials gets PublicAnonymous.
	Public Class = iota
	// Loopback is a TCP listener bound to a loopback address.
	Loopback
	// Unix is the unix socket; the peer's uid and gid are credentials.
	Unix
)

// PeerCred is a unix-socket peer as the kernel reports it (SO_PEERCRED).
type PeerCred struct {
	PID      int32
	UID, GID uint32
}

// Conn is what the listener knows of a connection.
type Conn struct {
	Class Class
	// Peer is set on the unix socket when the kernel named the peer.
	Peer *PeerCred
}

type connKey struct{}

// WithConn returns ctx carrying c, as http.Server's ConnContext does.
func WithConn(ctx context.Context, c Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ConnOf returns what ConnContext recorded; a request of unknown origin
// is Public, the strictest class.
func ConnOf(ctx context.Context) Conn {
	c, _ := ctx.Value(connKey{}).(Conn)
	return c
}

// ConnContext returns an http.Server ConnContext for a listener of class
// cl: on the unix socket it asks the kernel who the peer is.
func ConnContext(cl Class) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		info := Conn{Class: cl}
		if uc, ok := c.(*net.UnixConn); ok {
			if p, err := PeerOf(uc); err == nil {
				info.Peer = &p
			}
		}
		return WithConn(ctx, info)
	}
}

// IsLoopbackHost reports whether host (from host:port) names only the
// loopback interface. An empty host, 0.0.0.0 or :: is every interface;
// a name other than localhost may resolve anywhere.
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Token is one bearer token, known by its SHA-256 digest.
type Token struct {
	Name   string
	SHA256 [32]byte
	Roles  Roles
}

// Cert maps a TLS client certificate to roles: by the SHA-256 of the
// leaf's DER (a pin, valid with or without a CA), or by the subject's
// common name or a DNS SAN, valid only when the chain verified against
// the server's client CA.
type Cert struct {
	Name   string
	SHA256 *[32]byte
	// Subject is matched against the CN and the DNS names.
	Subject string
	Roles   Roles
}

// Peer maps a unix-socket peer's uid or gid to roles.
type Peer struct {
	Name     string
	UID, GID *uint32
	Roles    Roles
}

// Policy is what a node accepts; it is immutable once built, and
// replaced whole on reload.
type Policy struct {
	// Anonymous is what a caller without credentials gets on loopback
	// and the unix socket; PublicAnonymous on a listener beyond loopback.
	Anonymous, PublicAnonymous Roles
	Tokens                     []Token
	Certs                      []Cert
	Peers                      []Peer
	// ClientCAs is what a certificate mapped by subject must chain to;
	// nil trusts no subject.
	ClientCAs *x509.CertPool

	// chains caches, by leaf fingerprint, whether a client certificate
	// chained to ClientCAs: verifying a chain costs far more than a
	// request, and a keep-alive client presents the same leaf each time.
	chains sync.Map // [32]byte -> bool
	cached atomic.Int64
}

// maxChainCache bounds the chain cache: past it a certificate is
// verified on every request, so a flood of certificates costs CPU, not
// memory.
const maxChainCache = 4096

// Identity is who a request is and what it may do.
type Identity struct {
	// Via names the credentials recognised ("token prod-front",
	// "cert bench-01", "uid 1000"); empty for an anonymous caller.
	Via   []string
	Roles Roles
	// BadToken is set when a bearer token came that the node does not
	// know: the request is refused with 401 whatever the route.
	BadToken bool
}

// Authenticated reports whether any credential was recognised.
func (id Identity) Authenticated() bool { return len(id.Via) > 0 }

// Authenticator holds the policy in force; Set replaces it (on SIGHUP)
// without disturbing requests in flight. The zero value refuses
// everything.
type Authenticator struct {
	p atomic.Pointer[Policy]
}

// New returns an Authenticator enforcing p.
func New(p *Policy) *Authenticator {
	a := &Authenticator{}
	a.Set(p)
	return a
}

// Set replaces the policy.
func (a *Authenticator) Set(p *Policy) { a.p.Store(p) }

// Policy returns the policy in force.
func (a *Authenticator) Policy() *Policy { return a.p.Load() }

// HashToken is the digest a token is stored under.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// ParseDigest reads a SHA-256 digest written as 64 hex digits (colons,
// as openssl prints fingerprints, allowed).
func ParseDigest(s string) ([32]byte, error) {
	var d [32]byte
	h := strings.ToLower(strings.ReplaceAll(s, ":", ""))
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		return d, errors.New("want a SHA-256 digest: 64 hex digits")
	}
	copy(d[:], b)
	return d, nil
}

// Identify says who r is under the policy in force. The roles are the
// union of what the listener grants an anonymous caller and of every
// credential recognised: presenting a credential never loses a role.
func (a *Authenticator) Identify(r *http.Request) Identity {
	p := a.p.Load()
	if p == nil {
		return Identity{}
	}
	conn := ConnOf(r.Context())
	var id Identity
	switch conn.Class {
	case Loopback, Unix:
		id.Roles = p.Anonymous
	default:
		id.Roles = p.PublicAnonymous
	}
	// A node without tokens does not read Authorization at all: OpenAI
	// clients send a placeholder key whatever the server wants.
	if len(p.Tokens) > 0 {
		if tok, ok := bearer(r); ok {
			if t := p.token(tok); t != nil {
				id.Roles |= t.Roles
				id.Via = append(id.Via, "token "+t.Name)
			} else {
				id.BadToken = true
			}
		}
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		for _, c := range p.matchCert(r.TLS) {
			id.Roles |= c.Roles
			id.Via = append(id.Via, "cert "+c.Name)
		}
	}
	if conn.Peer != nil {
		for _, pe := range p.Peers {
			if (pe.UID != nil && *pe.UID == conn.Peer.UID) || (pe.GID != nil && *pe.GID == conn.Peer.GID) {
				id.Roles |= pe.Roles
				id.Via = append(id.Via, "peer "+pe.Name)
			}
		}
	}
	return id
}

// chainsToCA reports whether the client's chain verifies against
// ClientCAs for client authentication.
func (p *Policy) chainsToCA(fp [32]byte, certs []*x509.Certificate) bool {
	if p.ClientCAs == nil {
		return false
	}
	if v, ok := p.chains.Load(fp); ok {
		return v.(bool)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: p.ClientCAs, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if p.cached.Add(1) <= maxChainCache {
		p.chains.Store(fp, err == nil)
	}
	return err == nil
}

// bearer returns the token of an "Authorization: Bearer" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// token finds the token whose digest is tok's. Every stored digest is
// compared, in constant time, so how long the search takes says nothing
// of which digest (or how much of one) matched.
func (p *Policy) token(tok string) *Token {
	d := HashToken(tok)
	var hit *Token
	for i := range p.Tokens {
		if subtle.ConstantTimeCompare(d[:], p.Tokens[i].SHA256[:]) == 1 {
			hit = &p.Tokens[i]
		}
	}
	return hit
}

// matchCert returns the mappings the client's certificate satisfies.
func (p *Policy) matchCert(cs *tls.ConnectionState) []*Cert {
	leaf := cs.PeerCertificates[0]
	fp := sha256.Sum256(leaf.Raw)
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil // pinned or not, an expired certificate proves nothing
	}
	var out []*Cert
	for i := range p.Certs {
		c := &p.Certs[i]
		switch {
		case c.SHA256 != nil:
			if subtle.ConstantTimeCompare(fp[:], c.SHA256[:]) == 1 {
				out = append(out, c)
			}
		case c.Subject != "" && p.chainsToCA(fp, cs.PeerCertificates):
			if leaf.Subject.CommonName == c.Subject || slices.Contains(leaf.DNSNames, c.Subject) {
				out = append(out, c)
			}
		}
	}
	return out
}

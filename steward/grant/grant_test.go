package grant_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/steward"
	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

var ctx = context.Background()

// t0 is the tests' "now".
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func key(t testing.TB, seed byte) *steward.Key {
	t.Helper()
	k, err := steward.NewKeyFromSeed(bytes.Repeat([]byte{seed}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func requestID(n byte) wire.ContentID { return wire.ContentOf([]byte{'r', n}) }

// base is a valid grant for request 1 at the tests' steward (seed 0).
func base() grant.Grant {
	return grant.Grant{
		Audience:  []ed25519.PublicKey{stewardKey().Public()},
		Holder:    "lab-7",
		Action:    grant.ActionInfer,
		Request:   requestID(1),
		BudgetUJ:  1_000_000,
		NotBefore: t0.Add(-time.Hour),
		Expires:   t0.Add(time.Hour),
	}
}

func issue(t testing.TB, k *steward.Key, g grant.Grant) *grant.Signed {
	t.Helper()
	s, err := grant.Issue(k, g, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIssueOpenRoundTrip(t *testing.T) {
	k := key(t, 1)
	for _, any := range []bool{false, true} {
		g := base()
		g.AnyRequest = any
		s := issue(t, k, g)
		if s.ID != wire.ContentOf(s.Envelope) {
			t.Fatal("grant id is not the content id of the envelope")
		}
		o, err := grant.Open(s.Envelope, trustOnly(k.Public()))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if o.ID != s.ID || !bytes.Equal(o.Issuer, k.Public()) || !sameKeys(o.Audience, g.Audience) ||
			o.Holder != g.Holder || o.Action != g.Action ||
			o.AnyRequest != any || o.Resource() != s.Resource() || o.BudgetUJ != g.BudgetUJ ||
			!o.NotBefore.Equal(g.NotBefore) || !o.Expires.Equal(g.Expires) || o.Nonce != s.Nonce {
			t.Fatalf("round trip changed the grant:\n got %+v\nwant %+v", o.Grant, s.Grant)
		}
		if s.Nonce == ([grant.NonceSize]byte{}) {
			t.Fatal("Issue left the nonce zero")
		}
		if any && o.Resource() != "*" || !any && o.Resource() != requestID(1).String() {
			t.Fatalf("resource %q", o.Resource())
		}
	}
	// The same content with the same nonce is the same grant, byte for byte.
	g := base()
	g.Nonce = [grant.NonceSize]byte{9}
	a, b := issue(t, k, g), issue(t, k, g)
	if !bytes.Equal(a.Envelope, b.Envelope) {
		t.Fatal("issuing is not deterministic for a fixed nonce")
	}
	// The audience is signed in ascending order whatever order it is given
	// in, so one audience has one byte form.
	lo, hi := key(t, 3).Public(), key(t, 4).Public()
	if bytes.Compare(lo, hi) > 0 {
		lo, hi = hi, lo
	}
	g.Audience = []ed25519.PublicKey{hi, lo}
	c := issue(t, k, g)
	g.Audience = []ed25519.PublicKey{lo, hi}
	if d := issue(t, k, g); !bytes.Equal(c.Envelope, d.Envelope) {
		t.Fatal("the audience's order changed the envelope")
	}
	if !lo.Equal(c.Audience[0]) || !hi.Equal(c.Audience[1]) {
		t.Fatal("Issue did not return the audience in its signed order")
	}
	o, err := grant.Open(c.Envelope, trustOnly(k.Public()))
	if err != nil || !sameKeys(o.Audience, c.Audience) {
		t.Fatalf("open a two-steward grant: %v, audience %x", err, o.Audience)
	}
}

func sameKeys(a, b []ed25519.PublicKey) bool {
	return slices.EqualFunc(a, b, func(x, y ed25519.PublicKey) bool { return x.Equal(y) })
}

// trustOnly trusts exactly the keys given.
func trustOnly(keys ...ed25519.PublicKey) func(ed25519.PublicKey) error {
	return func(pub ed25519.PublicKey) error {
		for _, k := range keys {
			if k.Equal(pub) {
				return nil
			}
		}
		return fmt.Errorf("%w: %x", grant.ErrUnknownIssuer, []byte(pub))
	}
}

func TestOpenNeedsTrustAndInspectDoesNot(t *testing.T) {
	issuer, stranger := key(t, 1), key(t, 2)
	s := issue(t, stranger, base())
	if o, err := grant.Open(s.Envelope, nil); err == nil || o != nil || !strings.Contains(err.Error(), "Inspect") {
		t.Fatalf("Open with no trust decision: %v, %v", o, err)
	}
	if _, err := grant.Open(s.Envelope, trustOnly(issuer.Public())); !errors.Is(err, grant.ErrUnknownIssuer) {
		t.Fatalf("Open of a stranger's grant: %v, want ErrUnknownIssuer", err)
	}
	u, err := grant.Inspect(s.Envelope)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if u.ID != s.ID || !u.Issuer.Equal(stranger.Public()) || u.Holder != s.Holder || !bytes.Equal(u.Envelope, s.Envelope) {
		t.Fatalf("inspect shows %+v, issued %+v", u.Grant, s.Grant)
	}
	// Inspect still checks the signature against the carried kid.
	bad := bytes.Clone(s.Envelope)
	bad[len(bad)-1] ^= 1
	if _, err := grant.Inspect(bad); !errors.Is(err, grant.ErrBadSignature) {
		t.Fatalf("inspect of an altered grant: %v, want ErrBadSignature", err)
	}
}

func TestIssueRefusesBadGrants(t *testing.T) {
	k := key(t, 1)
	tests := map[string]func(*grant.Grant){
		"empty holder":       func(g *grant.Grant) { g.Holder = "" },
		"empty action":       func(g *grant.Grant) { g.Action = "" },
		"no resource":        func(g *grant.Grant) { g.Request = wire.ContentID{} },
		"zero budget":        func(g *grant.Grant) { g.BudgetUJ = 0 },
		"expires before nbf": func(g *grant.Grant) { g.Expires = g.NotBefore },
		"holder not utf-8":   func(g *grant.Grant) { g.Holder = "\xff" },
		"no audience":        func(g *grant.Grant) { g.Audience = nil },
		"short audience key": func(g *grant.Grant) { g.Audience = []ed25519.PublicKey{make([]byte, 31)} },
		"audience repeated":  func(g *grant.Grant) { g.Audience = append(g.Audience, g.Audience[0]) },
		"audience too large": func(g *grant.Grant) {
			g.Audience = nil
			for i := range grant.MaxAudience + 1 {
				id := wire.ContentOf([]byte{byte(i)})
				g.Audience = append(g.Audience, id[:])
			}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			g := base()
			mutate(&g)
			if _, err := grant.Issue(k, g, rand.Reader); !errors.Is(err, grant.ErrMalformed) {
				t.Fatalf("issue: %v, want ErrMalformed", err)
			}
		})
	}
}

type rig struct {
	path string
	led  *ledger.Ledger
	auth *grant.Authoriser
	now  time.Time
}

func newRig(t testing.TB, trusted ...ed25519.PublicKey) *rig {
	t.Helper()
	r := &rig{path: filepath.Join(t.TempDir(), "ledger"), now: t0}
	led, _, err := ledger.Open(r.path, nil, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r.led = led
	r.auth, err = grant.NewAuthoriser(grant.Config{Steward: stewardKey().Public(), Trusted: trusted, Ledger: led, Clock: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) size(t *testing.T) int64 {
	t.Helper()
	st, err := os.Stat(r.path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

var sentinels = []error{grant.ErrMalformed, grant.ErrUnknownIssuer, grant.ErrBadSignature, grant.ErrWrongAudience,
	grant.ErrNotYetValid, grant.ErrExpired, grant.ErrWrongAction, grant.ErrWrongResource, grant.ErrBudgetExhausted}

// sign1 signs an arbitrary payload map as a grant envelope would be, to
// build grants Issue refuses to make.
func sign1(t *testing.T, k *steward.Key, m map[string]any) []byte {
	t.Helper()
	p, err := wire.EncMode().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	env, err := steward.Sign1(k, p)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func payloadMap(k *steward.Key) map[string]any {
	return map[string]any{
		"jcp_grant": grant.Profile, "issuer": k.ID(), "audience": stewardKey().ID(), "holder": "lab-7", "action": "infer",
		"resource": requestID(1).String(), "budget_uj": uint64(1_000_000),
		"not_before_unix_ms": uint64(t0.Add(-time.Hour).UnixMilli()), "expires_unix_ms": uint64(t0.Add(time.Hour).UnixMilli()),
		"nonce": hex.EncodeToString(make([]byte, 16)),
	}
}

func TestAuthoriseRefusals(t *testing.T) {
	issuer, stranger := key(t, 1), key(t, 2)
	good := issue(t, issuer, base())

	with := func(mutate func(*grant.Grant)) []byte {
		g := base()
		mutate(&g)
		return issue(t, issuer, g).Envelope
	}
	altered := bytes.Clone(good.Envelope)
	nonce := []byte(hex.EncodeToString(good.Nonce[:]))
	i := bytes.Index(altered, nonce)
	if i < 0 {
		t.Fatal("nonce not found in the envelope")
	}
	altered[i] ^= 0x01 // still a lower-case hex digit, still valid CBOR

	// A re-encoding of the good envelope with a padded (non-minimal) length
	// for the signature: same signature, different bytes, different id.
	sig := good.Envelope[len(good.Envelope)-64:]
	hdr := good.Envelope[:len(good.Envelope)-64-2] // 0x58 0x40 precede the signature
	if good.Envelope[len(hdr)] != 0x58 || good.Envelope[len(hdr)+1] != 0x40 {
		t.Fatalf("unexpected signature header % x", good.Envelope[len(hdr):len(hdr)+2])
	}
	padded := append(append(bytes.Clone(hdr), 0x59, 0x00, 0x40), sig...)

	otherIssuer := payloadMap(issuer)
	otherIssuer["issuer"] = stranger.ID()
	missing := payloadMap(issuer)
	delete(missing, "budget_uj")
	upper := payloadMap(issuer)
	upper["resource"] = "AB" + requestID(1).String()[2:]
	wrongProfile := payloadMap(issuer)
	wrongProfile["jcp_grant"] = "mesh/0"
	extra := payloadMap(issuer)
	extra["x_color"] = "blue"
	// The audience's wire form admits exactly one spelling of one set.
	other := key(t, 3)
	lo, hi := stewardKey().ID(), other.ID()
	if lo > hi {
		lo, hi = hi, lo
	}
	audience := func(a any) []byte {
		m := payloadMap(issuer)
		if a == nil {
			delete(m, "audience")
		} else {
			m["audience"] = a
		}
		return sign1(t, issuer, m)
	}
	elsewhere := base()
	elsewhere.Audience = []ed25519.PublicKey{other.Public()}
	// Misdirected and expired: the audience is judged first.
	elsewhereExpired := elsewhere
	elsewhereExpired.Expires = t0

	tests := []struct {
		name    string
		env     []byte
		request wire.ContentID
		ceiling uint64
		now     time.Time
		want    error
	}{
		{name: "signed by an untrusted key", env: issue(t, stranger, base()).Envelope, want: grant.ErrUnknownIssuer},
		{name: "bytes altered after signing", env: altered, want: grant.ErrBadSignature},
		{name: "expired", env: good.Envelope, now: t0.Add(time.Hour), want: grant.ErrExpired},
		{name: "not yet valid", env: good.Envelope, now: t0.Add(-time.Hour - time.Millisecond), want: grant.ErrNotYetValid},
		{name: "another request", env: good.Envelope, request: requestID(2), want: grant.ErrWrongResource},
		{name: "wrong action", env: with(func(g *grant.Grant) { g.Action = "train" }), want: grant.ErrWrongAction},
		{name: "garbage", env: []byte("this is not a grant at all"), want: grant.ErrMalformed},
		{name: "empty", env: []byte{}, want: grant.ErrMalformed},
		{name: "receipt-shaped payload", env: sign1(t, issuer, map[string]any{"mesh_receipt": "mesh/1"}), want: grant.ErrMalformed},
		{name: "re-encoded envelope", env: padded, want: grant.ErrMalformed},
		{name: "trailing byte", env: append(bytes.Clone(good.Envelope), 0), want: grant.ErrMalformed},
		{name: "untagged envelope", env: good.Envelope[1:], want: grant.ErrMalformed},
		{name: "issuer field is not the signer", env: sign1(t, issuer, otherIssuer), want: grant.ErrMalformed},
		{name: "missing budget", env: sign1(t, issuer, missing), want: grant.ErrMalformed},
		{name: "upper-case hex resource", env: sign1(t, issuer, upper), want: grant.ErrMalformed},
		{name: "unknown profile", env: sign1(t, issuer, wrongProfile), want: grant.ErrMalformed},
		{name: "unknown field", env: sign1(t, issuer, extra), want: grant.ErrMalformed},
		{name: "budget below the ceiling", env: good.Envelope, ceiling: 1_000_001, want: grant.ErrBudgetExhausted},
		{name: "for another steward", env: issue(t, issuer, elsewhere).Envelope, want: grant.ErrWrongAudience},
		{name: "for another steward and expired", env: issue(t, issuer, elsewhereExpired).Envelope, want: grant.ErrWrongAudience},
		{name: "for this and another steward", env: audience(lo + "," + hi), want: nil},
		{name: "missing audience", env: audience(nil), want: grant.ErrMalformed},
		{name: "empty audience", env: audience(""), want: grant.ErrMalformed},
		{name: "audience as an array", env: audience([]string{stewardKey().ID()}), want: grant.ErrMalformed},
		{name: "audience out of order", env: audience(hi + "," + lo), want: grant.ErrMalformed},
		{name: "audience repeated", env: audience(lo + "," + lo), want: grant.ErrMalformed},
		{name: "audience with a trailing comma", env: audience(stewardKey().ID() + ","), want: grant.ErrMalformed},
		{name: "audience with a space", env: audience(lo + ", " + hi), want: grant.ErrMalformed},
		{name: "upper-case audience", env: audience(strings.ToUpper(stewardKey().ID())), want: grant.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, issuer.Public())
			// An earlier serve on the good grant gives the ledger a balance
			// that a refusal must leave alone.
			h, err := r.auth.Authorise(ctx, good.Envelope, requestID(1), 1000)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Settle(600); err != nil {
				t.Fatal(err)
			}
			before, size := mustBalance(t, r.led, good.ID), r.size(t)

			if !tc.now.IsZero() {
				r.now = tc.now
			}
			req := tc.request
			if req.IsZero() {
				req = requestID(1)
			}
			ceiling := tc.ceiling
			if ceiling == 0 {
				ceiling = 1000
			}
			hold, err := r.auth.Authorise(ctx, tc.env, req, ceiling)
			if tc.want == nil { // the control: the same rig takes this grant
				if err != nil {
					t.Fatalf("authorise: %v", err)
				}
				if err := hold.Release(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if hold != nil || !errors.Is(err, tc.want) {
				t.Fatalf("authorise: hold %v, err %v; want %v", hold, err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) {
					t.Errorf("the refusal %q also matches %q", err, s)
				}
			}
			if after := mustBalance(t, r.led, good.ID); after != before {
				t.Errorf("refusal changed the balance: %+v -> %+v", before, after)
			}
			if got := r.size(t); got != size {
				t.Errorf("refusal changed the ledger file: %d -> %d bytes", size, got)
			}
		})
	}
}

func mustBalance(t *testing.T, l *ledger.Ledger, g wire.ContentID) ledger.Balance {
	t.Helper()
	b, ok := l.Balance(g)
	if !ok {
		t.Fatalf("no account for %s", g)
	}
	return b
}

func TestAuthoriseBoundariesAndCache(t *testing.T) {
	issuer := key(t, 1)
	g := base()
	g.AnyRequest = true
	g.BudgetUJ = 5000
	s := issue(t, issuer, g)
	r := newRig(t, issuer.Public())

	r.now = g.NotBefore // valid from the first millisecond
	h, err := r.auth.Authorise(ctx, s.Envelope, requestID(7), 3000)
	if err != nil {
		t.Fatalf("at not_before: %v", err)
	}
	if h.Grant != s.ID || h.AmountUJ != 3000 {
		t.Fatalf("hold %+v", h)
	}
	// The remaining budget, not the total, must cover the next ceiling.
	if _, err := r.auth.Authorise(ctx, s.Envelope, requestID(8), 2001); !errors.Is(err, grant.ErrBudgetExhausted) {
		t.Fatalf("over the remainder: %v", err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if err := h.Settle(1); err == nil {
		t.Fatal("a released hold settled")
	}
	h, err = r.auth.Authorise(ctx, s.Envelope, requestID(8), 5000)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	h.Settle(4000)

	// The grant is now cached; the interval is still judged every time.
	r.now = g.Expires.Add(-time.Millisecond)
	h, err = r.auth.Authorise(ctx, s.Envelope, requestID(9), 1000)
	if err != nil {
		t.Fatalf("last valid millisecond: %v", err)
	}
	h.Release()
	r.now = g.Expires
	if _, err := r.auth.Authorise(ctx, s.Envelope, requestID(9), 1000); !errors.Is(err, grant.ErrExpired) {
		t.Fatalf("cached grant at expiry: %v, want ErrExpired", err)
	}
	// A buffer the caller reuses cannot poison the cache.
	buf := bytes.Clone(s.Envelope)
	r.now = t0
	if _, err := r.auth.Verify(buf); err != nil {
		t.Fatal(err)
	}
	buf[len(buf)-1] ^= 1
	if _, err := r.auth.Verify(buf); !errors.Is(err, grant.ErrBadSignature) {
		t.Fatalf("altered reused buffer: %v, want ErrBadSignature", err)
	}
}

func TestNewAuthoriserChecksConfig(t *testing.T) {
	led, _, err := ledger.Open(filepath.Join(t.TempDir(), "l"), nil, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	self, issuers := stewardKey().Public(), []ed25519.PublicKey{key(t, 1).Public()}
	for name, cfg := range map[string]grant.Config{
		"no ledger":     {Steward: self, Trusted: issuers},
		"no issuers":    {Steward: self, Ledger: led},
		"short key":     {Steward: self, Ledger: led, Trusted: []ed25519.PublicKey{make([]byte, 31)}},
		"no steward":    {Ledger: led, Trusted: issuers},
		"short steward": {Steward: self[:31], Ledger: led, Trusted: issuers},
	} {
		if _, err := grant.NewAuthoriser(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	a, err := grant.NewAuthoriser(grant.Config{Steward: self, Ledger: led, Trusted: issuers})
	if err != nil || !a.Steward().Equal(self) {
		t.Fatalf("a good config: %v", err)
	}
}

// TestProfileExample pins the worked example of PROFILE.md §14, so
// the document and the code cannot drift apart.
func TestProfileExample(t *testing.T) {
	const (
		wantEnv = "d2845826a201270458208a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5ca0590178aa656e6f6e63657820303130323033303430353036303730383039306130623063306430653066313066616374696f6e65696e66657266686f6c646572656c61622d37666973737565727840386138386533646437343039663139356664353264623264336362613564373263613637303962663164393431323162663337343838303162343066366635636861756469656e6365784038313339373730656138376431373566353661333534363663333463376563636362386438613931623465653337613235646636306635623866633962333934687265736f75726365784030343466313461353535356135636534636537646233356334666130353739643865666565626561623665363965616635383633333565323264306634333730696275646765745f756a1a004c4b40696a63705f6772616e74676d657368642f316f657870697265735f756e69785f6d731b0000019c167fcc00726e6f745f6265666f72655f756e69785f6d731b0000019b76daa800584006a3552ea87c0cb33071b732511e715eb3666989e571bfbb6a5dab2f6724e606f483b01bb1b4f004a96b73ecb46a50433371bec23a08913dc7af5df72f3ab60f"
		wantID  = "38f3ff750025f432990834e253a236b39da5f65b86f5a9cc4ebe376f89f5f96a"
	)
	var nonce [grant.NonceSize]byte
	for i := range nonce {
		nonce[i] = byte(i + 1)
	}
	s, err := grant.Issue(key(t, 1), grant.Grant{
		Audience: []ed25519.PublicKey{key(t, 2).Public()},
		Holder:   "lab-7", Action: "infer", Request: wire.ContentOf([]byte("example request")), BudgetUJ: 5_000_000,
		NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Expires: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), Nonce: nonce,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(s.Envelope); got != wantEnv {
		t.Fatalf("envelope\n got %s\nwant %s", got, wantEnv)
	}
	if s.ID.String() != wantID {
		t.Fatalf("grant_id %s, want %s", s.ID, wantID)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "PROFILE.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), wantID) || !strings.Contains(strings.Join(strings.Fields(string(doc)), ""), wantEnv) {
		t.Fatal("PROFILE.md §14 no longer shows this worked example")
	}
	if got := hex.EncodeToString(key(t, 2).Public()); !strings.Contains(string(doc), got) {
		t.Fatalf("PROFILE.md §14 does not state the audience's public key %s", got)
	}
	env, _ := hex.DecodeString(wantEnv)
	if _, err := grant.Open(env, trustOnly(key(t, 1).Public())); err != nil {
		t.Fatalf("the documented envelope does not open: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/steward"
	"meshd/steward/grant"
	"meshd/wire"
)

func TestGrantIssueShowVerify(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "issuer.key")
	k, err := steward.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := steward.WriteKeyFile(keyPath, k); err != nil {
		t.Fatal(err)
	}
	other, _ := steward.GenerateKey(rand.Reader)
	req := wire.ContentOf([]byte("a request"))
	out := filepath.Join(dir, "g.cose")
	ctx := context.Background()
	call := func(args ...string) (string, error) {
		var o, e bytes.Buffer
		err := run(ctx, append([]string{"grant"}, args...), &o, &e)
		return o.String() + e.String(), err
	}

	if _, err := call("issue", "-key", keyPath, "-holder", "lab 7", "-resource", req.String(), "-budget", "5000000",
		"-not-before", "2026-01-01T00:00:00Z", "-expires", "2026-02-01T00:00:00Z", "-o", out); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := grant.Open(env, nil)
	if err != nil {
		t.Fatalf("the issued file does not open: %v", err)
	}
	if !bytes.Equal(s.Issuer, k.Public()) || s.Holder != "lab 7" || s.Request != req || s.AnyRequest || s.BudgetUJ != 5_000_000 ||
		!s.NotBefore.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !s.Expires.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("issued grant: %+v", s.Grant)
	}
	if _, err := call("issue", "-key", keyPath, "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "1h", "-o", out); err == nil ||
		!strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("issue over an existing file: %v", err)
	}

	text, err := call("show", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"grant_id " + s.ID.String(), "holder     \"lab 7\"", "budget_uj  5000000", "resource   " + req.String()} {
		if !strings.Contains(text, want) {
			t.Errorf("show output lacks %q:\n%s", want, text)
		}
	}

	in := "2026-01-15T00:00:00Z"
	if text, err := call("verify", "-issuer", k.ID(), "-request", req.String(), "-at", in, out); err != nil || !strings.Contains(text, "grant OK") {
		t.Fatalf("verify: %v\n%s", err, text)
	}
	for _, tc := range []struct {
		name string
		args []string
		want error
	}{
		{"untrusted", []string{"-issuer", other.ID(), "-at", in}, grant.ErrUnknownIssuer},
		{"expired", []string{"-issuer", k.ID(), "-at", "2026-02-01T00:00:00Z"}, grant.ErrExpired},
		{"not yet valid", []string{"-issuer", k.ID(), "-at", "2025-12-31T23:59:59Z"}, grant.ErrNotYetValid},
		{"other request", []string{"-issuer", k.ID(), "-at", in, "-request", wire.ContentOf(nil).String()}, grant.ErrWrongResource},
	} {
		if _, err := call(append(append([]string{"verify"}, tc.args...), out)...); !errors.Is(err, tc.want) {
			t.Errorf("verify %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// A flipped byte in the file is refused by verify and by show.
	env[len(env)-1] ^= 1
	bad := filepath.Join(dir, "bad.cose")
	os.WriteFile(bad, env, 0o644)
	if _, err := call("verify", "-issuer", k.ID(), "-at", in, bad); !errors.Is(err, grant.ErrBadSignature) {
		t.Errorf("verify altered: %v", err)
	}
	if _, err := call("show", bad); !errors.Is(err, grant.ErrBadSignature) {
		t.Errorf("show altered: %v", err)
	}

	// Relative times and "*".
	rel := filepath.Join(dir, "rel.cose")
	before := time.Now()
	if _, err := call("issue", "-key", keyPath, "-holder", "x", "-resource", "*", "-budget", "7", "-not-before", "-1m", "-expires", "2h", "-o", rel); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(rel)
	r, err := grant.Open(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.AnyRequest || r.Expires.Before(before.Add(2*time.Hour-time.Second)) || r.Expires.After(time.Now().Add(2*time.Hour)) ||
		r.NotBefore.After(time.Now().Add(-time.Minute)) {
		t.Fatalf("relative times: not_before %v, expires %v (issued at %v)", r.NotBefore, r.Expires, before)
	}
	if _, err := call("verify", "-issuer", k.ID(), rel); err != nil {
		t.Fatalf("verify now: %v", err)
	}

	for _, args := range [][]string{
		{},
		{"frob"},
		{"issue", "-key", keyPath},
		{"issue", "-key", keyPath, "-holder", "x", "-resource", "nothex", "-budget", "1", "-expires", "1h", "-o", filepath.Join(dir, "n")},
		{"issue", "-key", keyPath, "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "tomorrow", "-o", filepath.Join(dir, "n")},
		{"verify", out},
		{"show"},
	} {
		if _, err := call(args...); !errors.Is(err, errUsage) {
			t.Errorf("grant %q: %v, want a usage error", args, err)
		}
	}
}

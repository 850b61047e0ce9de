package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/cmd/internal/cli"
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
	// The stewards: the grant is for stewardA and stewardB, not stewardC.
	stewardA, _ := steward.GenerateKey(rand.Reader)
	stewardB, _ := steward.GenerateKey(rand.Reader)
	stewardC, _ := steward.GenerateKey(rand.Reader)
	req := wire.ContentOf([]byte("a request"))
	out := filepath.Join(dir, "g.cose")
	ctx := context.Background()
	call := func(args ...string) (string, error) {
		var o, e bytes.Buffer
		err := run(ctx, append([]string{"grant"}, args...), &o, &e)
		return o.String() + e.String(), err
	}

	if _, err := call("issue", "-key", keyPath, "-audience", stewardB.ID(), "-audience", stewardA.ID(), "-holder", "lab 7", "-resource", req.String(), "-budget", "5000000",
		"-not-before", "2026-01-01T00:00:00Z", "-expires", "2026-02-01T00:00:00Z", "-o", out); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	s, err := grant.Open(env, trustKey(k.Public()))
	if err != nil {
		t.Fatalf("the issued file does not open: %v", err)
	}
	audience := []string{stewardA.ID(), stewardB.ID()}
	slices.Sort(audience)
	if len(s.Audience) != 2 || hex.EncodeToString(s.Audience[0]) != audience[0] || hex.EncodeToString(s.Audience[1]) != audience[1] {
		t.Fatalf("issued audience %x, want %s", s.Audience, audience)
	}
	if !bytes.Equal(s.Issuer, k.Public()) || s.Holder != "lab 7" || s.Request != req || s.AnyRequest || s.BudgetUJ != 5_000_000 ||
		!s.NotBefore.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !s.Expires.Equal(time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("issued grant: %+v", s.Grant)
	}
	if _, err := call("issue", "-key", keyPath, "-audience", stewardA.ID(), "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "1h", "-o", out); err == nil ||
		!strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("issue over an existing file: %v", err)
	}

	text, err := call("show", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"grant_id " + s.ID.String(), "holder     \"lab 7\"", "budget_uj  5000000", "resource   " + req.String(),
		"audience   " + audience[0] + "\n           " + audience[1] + "\n", "NOT trusted"} {
		if !strings.Contains(text, want) {
			t.Errorf("show output lacks %q:\n%s", want, text)
		}
	}

	in := "2026-01-15T00:00:00Z"
	if text, err := call("verify", "-issuer", k.ID(), "-request", req.String(), "-at", in, out); err != nil || !strings.Contains(text, "grant OK") ||
		!strings.Contains(text, "not checked") {
		t.Fatalf("verify: %v\n%s", err, text)
	}
	for _, st := range []*steward.Key{stewardA, stewardB} {
		if text, err := call("verify", "-issuer", k.ID(), "-steward", st.ID(), "-at", in, out); err != nil || !strings.Contains(text, "grant OK") ||
			!strings.Contains(text, "steward "+st.ID()) {
			t.Fatalf("verify for a steward of the audience: %v\n%s", err, text)
		}
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
		{"other steward", []string{"-issuer", k.ID(), "-at", in, "-steward", stewardC.ID()}, grant.ErrWrongAudience},
		// The audience is judged before the clock, as a steward does.
		{"other steward, expired", []string{"-issuer", k.ID(), "-at", "2026-02-01T00:00:00Z", "-steward", stewardC.ID()}, grant.ErrWrongAudience},
		{"bad steward id", []string{"-issuer", k.ID(), "-at", in, "-steward", "abc"}, errUsage},
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
	if _, err := call("issue", "-key", keyPath, "-audience", stewardA.ID(), "-holder", "x", "-resource", "*", "-budget", "7", "-not-before", "-1m", "-expires", "2h", "-o", rel); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(rel)
	r, err := grant.Open(b, trustKey(k.Public()))
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
		{"issue", "-key", keyPath, "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "1h", "-o", filepath.Join(dir, "n")}, // no -audience
		{"issue", "-key", keyPath, "-audience", "nothex", "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "1h", "-o", filepath.Join(dir, "n")},
		{"issue", "-key", keyPath, "-audience", stewardA.ID(), "-holder", "x", "-resource", "nothex", "-budget", "1", "-expires", "1h", "-o", filepath.Join(dir, "n")},
		{"issue", "-key", keyPath, "-audience", stewardA.ID(), "-holder", "x", "-resource", "*", "-budget", "1", "-expires", "tomorrow", "-o", filepath.Join(dir, "n")},
		{"verify", out},
		{"show"},
	} {
		if _, err := call(args...); !errors.Is(err, errUsage) {
			t.Errorf("grant %q: %v, want a usage error", args, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "n")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused issue wrote its output: %v", err)
	}
}

// trustKey trusts exactly one issuer key.
func trustKey(k ed25519.PublicKey) func(ed25519.PublicKey) error {
	return func(pub ed25519.PublicKey) error {
		if !k.Equal(pub) {
			return fmt.Errorf("%w: %x", grant.ErrUnknownIssuer, []byte(pub))
		}
		return nil
	}
}

// A grant file is named on the command line and may be anything: show and
// verify must neither hang on a FIFO nor read /dev/zero or a huge file
// into memory.
func TestGrantFilesAreReadCarefully(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, make([]byte, 2*grant.MaxEnvelope+257), 0o644); err != nil {
		t.Fatal(err)
	}
	issuer := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		path string
		want error
	}{
		{fifo, cli.ErrNotRegular},
		{"/dev/zero", cli.ErrNotRegular},
		{huge, cli.ErrTooLarge},
	} {
		for _, args := range [][]string{{"grant", "show", tc.path}, {"grant", "verify", "-issuer", issuer, tc.path}} {
			done := make(chan error, 1)
			go func() {
				var o, e bytes.Buffer
				done <- run(context.Background(), args, &o, &e)
			}()
			select {
			case err := <-done:
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
					t.Errorf("%q: %v, want %v naming the path", args, err, tc.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%q hung", args)
			}
		}
	}
}

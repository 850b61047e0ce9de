package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/wire"
)

func TestKeygenAndVerify(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "s.key")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"keygen", "-o", key}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", err, fi)
	}
	if err := run(context.Background(), []string{"keygen", "-o", key}, &out, &errb); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("keygen overwrote: %v", err)
	}

	k, err := steward.LoadKeyFile(key)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "receipts")
	l, _, err := steward.OpenLog(context.Background(), logPath, steward.LogOptions{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	st := steward.New(k, l, steward.Options{})
	var env []byte
	for i := 0; i < 3; i++ {
		s, err := st.Seal(context.Background(), steward.Draft{
			Request: wire.ContentOf([]byte{byte(i)}), Backend: "b", Recipe: "r", Route: "why",
			Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Estimated(10),
			Metering: wire.Metering{Meter: "estimator"},
		})
		if err != nil {
			t.Fatal(err)
		}
		env = s.Envelope
	}
	l.Close()
	out.Reset()
	if err := run(context.Background(), []string{"verify", "-steward", k.ID(), logPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "log OK: 3 receipts") {
		t.Fatalf("verify output: %s", out.String())
	}
	envPath := filepath.Join(dir, "one.env")
	os.WriteFile(envPath, env, 0o644)
	if err := run(context.Background(), []string{"verify", "-envelope", envPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	// Tamper with the middle record: verify must fail naming sequence 1,
	// with the status for damage.
	seg := filepath.Join(logPath, steward.SegmentName(0))
	orig, _ := os.ReadFile(seg)
	b := bytes.Clone(orig)
	i := bytes.Index(b[8+12+len(env):], []byte("tokens_out")) + 8 + 12 + len(env)
	b[i] ^= 1
	os.WriteFile(seg, b, 0o644)
	err = run(context.Background(), []string{"verify", logPath}, &out, &errb)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != exitDamaged || !strings.Contains(err.Error(), "sequence 1") {
		t.Fatalf("tampered log: %v", err)
	}
	if err := run(context.Background(), []string{"verify"}, &out, &errb); !errors.Is(err, errUsage) {
		t.Fatalf("missing argument: %v", err)
	}
}

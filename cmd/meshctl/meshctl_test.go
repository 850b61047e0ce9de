package main

import (
	"bytes"
	"context"
	"encoding/binary"
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

// verify's exit status tells a torn tail (3) and a rollback against a pin
// (4) from damage (1); a kept checkpoint is a trust anchor and a pin.
func TestVerifyExitStatusAndPins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	k, err := steward.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{3}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "receipts")
	l, _, err := steward.OpenLog(ctx, logPath, steward.LogOptions{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	st := steward.New(k, l, steward.Options{})
	var heads []string
	for i := 0; i < 4; i++ {
		s, err := st.Seal(ctx, steward.Draft{
			Request: wire.ContentOf([]byte{byte(i)}), Backend: "b", Recipe: "r", Route: "why",
			Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Estimated(10),
			Metering: wire.Metering{Meter: "estimator"},
		})
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, s.ID.String())
	}
	l.Close()
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"log", "checkpoint", logPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	ckFile := filepath.Join(dir, "kept.checkpoint")
	os.WriteFile(ckFile, out.Bytes(), 0o600)
	if err := run(ctx, []string{"verify", "-q", "-checkpoint", ckFile, "-head", heads[3], logPath}, &out, &errb); err != nil {
		t.Fatalf("verify with the kept pins: %v", err)
	}
	status := func(args ...string) int {
		err := run(ctx, args, &out, &errb)
		var ee *cli.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.Code
		}
		return 1
	}
	seg := filepath.Join(logPath, steward.SegmentName(0))
	orig, _ := os.ReadFile(seg)
	os.WriteFile(seg, append(bytes.Clone(orig), 0, 0, 0, 9), 0o644) // a torn final write
	if got := status("verify", "-q", logPath); got != exitTorn {
		t.Fatalf("torn tail: status %d, want %d", got, exitTorn)
	}
	// Rolled back by one receipt, checkpoints removed with it: whoever kept
	// the head or the count still notices.
	var last int
	for off := 8; off < len(orig); {
		last = off
		off += 12 + int(binary.BigEndian.Uint32(orig[off:]))
	}
	os.WriteFile(seg, orig[:last], 0o644)
	os.Remove(filepath.Join(logPath, "checkpoints"))
	if got := status("verify", "-q", "-head", heads[3], logPath); got != exitPinned {
		t.Fatalf("rolled back past the pinned head: status %d, want %d", got, exitPinned)
	}
	if got := status("verify", "-q", "-count", "4", logPath); got != exitPinned {
		t.Fatalf("rolled back below the pinned count: status %d, want %d", got, exitPinned)
	}
	if got := status("verify", "-q", "-checkpoint", ckFile, logPath); got != exitDamaged {
		t.Fatalf("rolled back behind the kept checkpoint: status %d, want %d", got, exitDamaged)
	}
	if got := status("verify", "-q", logPath); got != 0 {
		t.Fatalf("unpinned verify of the shorter log: status %d", got)
	}
	if got := status("verify", "-envelope", "/dev/zero"); got != 1 {
		t.Fatalf("/dev/zero as an envelope: status %d", got)
	}
}

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
	"time"

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
			Metering: estimatorMetering,
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
	if !strings.Contains(out.String(), "log OK: 3 receipts") || !strings.Contains(out.String(), "rollback: cannot be detected") {
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
			Metering: estimatorMetering,
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
	out.Reset()
	if err := run(ctx, []string{"verify", "-q", "-checkpoint", ckFile, "-head", heads[3], logPath}, &out, &errb); err != nil {
		t.Fatalf("verify with the kept pins: %v", err)
	}
	// What an anchored verify did not read, it says.
	if !strings.Contains(out.String(), "not checked: receipts 0..") || !strings.Contains(out.String(), "rollback: checked only against what you pinned") {
		t.Fatalf("verify -checkpoint output: %s", out.String())
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

// estimatorMetering is the evidence of a figure with no meter behind it.
var estimatorMetering = wire.Metering{Meter: steward.EstimatorMeter, Kind: wire.KindEstimator, WindowNs: 2_000_000, ServeNs: 2_000_000}

// hwDraft is a serve measured by an ADC whose evidence supports HwShunt:
// full coverage, gaps within a period, a bound within 0.5 % of 5000 µJ.
func hwDraft(i byte) steward.Draft {
	return steward.Draft{
		Request: wire.ContentOf([]byte{'h', i}), Backend: "b", Recipe: "r", Route: "why",
		Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Measured(5000, 4500),
		Metering: wire.Metering{Meter: "ina226@i2c-1:0x40", Kind: wire.KindADC, WindowNs: 10_000_000, ServeNs: 9_500_000,
			ErrorUJ: 25, Samples: 10, MaxGapNs: 1_100_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 5_000, Shared: 1,
			FullScaleUW: 10_000_000},
	}
}

// A receipt whose HwShunt claim its own evidence does not support is
// refused by meshctl verify, as a log record and as a lone envelope, even
// though the steward's key signed it; the same receipt with honest
// evidence verifies.
func TestVerifyRefusesForgedEvidence(t *testing.T) {
	ctx := context.Background()
	k, err := steward.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{5}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	u64 := func(v uint64) *uint64 { return &v }
	text := func(s string) *string { return &s }
	cases := []struct {
		name string
		mut  func(*steward.Receipt)
		rule string // the rule the printed refusal names
	}{
		{"honest", nil, ""},
		{"estimator as meter, 0 samples, 0 ns window", func(r *steward.Receipt) {
			m := steward.EstimatorMeter
			r.Meter, r.Samples, r.WindowNs, r.ServeNs = &m, u64(0), u64(0), u64(0)
		}, "evidence rule 2"},
		{"1 sample and a 10 s gap", func(r *steward.Receipt) { r.Samples, r.MaxGapNs = u64(1), u64(10_000_000_000) }, "evidence rule 4"},
		{"1e9 µJ bound", func(r *steward.Receipt) { r.ErrorUJ = u64(1_000_000_000) }, "evidence rule 4"},
		{"apportioned", func(r *steward.Receipt) { r.Shared = u64(2) }, "evidence rule 4"},
		// Evidence that does not add up.
		{"1 sample over 10 s at a 1.1 ms period", func(r *steward.Receipt) {
			r.Samples, r.WindowNs, r.ServeNs, r.PeriodNs, r.MaxGapNs = u64(1), u64(10_000_000_000), u64(9_000_000_000), u64(1_100_000), u64(1_100_000)
		}, "evidence rule 5"},
		{"1-hour period and gap from one sample", func(r *steward.Receipt) {
			h := uint64(3_600_000_000_000)
			r.Samples, r.WindowNs, r.ServeNs, r.PeriodNs, r.MaxGapNs = u64(1), u64(h), u64(h), u64(h), u64(h)
		}, "evidence rule 6"},
		{"1e9 samples in 101 ms", func(r *steward.Receipt) {
			r.Samples, r.WindowNs, r.ServeNs = u64(1_000_000_000), u64(101_000_000), u64(100_000_000)
		}, "evidence rule 5"},
		{"idle 1e12 µW", func(r *steward.Receipt) { r.IdleUW = u64(1_000_000_000_000) }, "evidence rule 8"},
		{"span naming rapl declared adc", func(r *steward.Receipt) {
			r.Meter = text("span(ina226@i2c-1:0x40+rapl:package-0)")
		}, "evidence rule 10"},
		{"1 ns window for 2 tokens", func(r *steward.Receipt) {
			r.WindowNs, r.ServeNs, r.Samples, r.MaxGapNs = u64(1), u64(1), u64(1), u64(1)
		}, "evidence rule 7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			logPath := filepath.Join(dir, "receipts")
			l, _, err := steward.OpenLog(ctx, logPath, steward.LogOptions{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			st := steward.New(k, l, steward.Options{})
			if _, err := st.Seal(ctx, hwDraft(0)); err != nil {
				t.Fatal(err)
			}
			// Signed with the steward's key but appended past Seal, which
			// would refuse it.
			var env []byte
			_, _, err = l.Append(ctx, func(seq uint64, prev *wire.ContentID) ([]byte, error) {
				r, err := steward.New(k, nil, steward.Options{}).Build(hwDraft(1), seq, prev, make([]byte, steward.NonceSize), time.UnixMilli(1_767_225_600_000))
				if err != nil {
					return nil, err
				}
				if c.mut != nil {
					c.mut(r)
				}
				core, err := r.EncodeCore()
				if err != nil {
					return nil, err
				}
				env, err = steward.Sign1(k, core)
				return env, err
			})
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			envPath := filepath.Join(dir, "one.env")
			if err := os.WriteFile(envPath, env, 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			logErr := run(ctx, []string{"verify", "-steward", k.ID(), logPath}, &out, &errb)
			envErr := run(ctx, []string{"verify", "-envelope", "-steward", k.ID(), envPath}, &out, &errb)
			if c.mut == nil {
				if logErr != nil || envErr != nil {
					t.Fatalf("honest evidence refused: log %v, envelope %v", logErr, envErr)
				}
				return
			}
			var ee *cli.ExitError
			if !errors.As(logErr, &ee) || ee.Code != exitDamaged || !strings.Contains(logErr.Error(), "sequence 1") ||
				steward.ReasonOf(logErr) != steward.RefusedEvidence {
				t.Fatalf("forged log record: %v", logErr)
			}
			if steward.ReasonOf(envErr) != steward.RefusedEvidence || !strings.Contains(envErr.Error(), c.rule+":") ||
				!strings.Contains(envErr.Error(), "["+string(steward.RefusedEvidence)+"]") {
				t.Fatalf("forged envelope: %v, want a refusal naming %s [%s]", envErr, c.rule, steward.RefusedEvidence)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/cmd/internal/cli"
	"meshd/steward"
	"meshd/wire"
)

// meshctl verify follows x_idle_record: a log whose serve names the span's
// idle record, stating its power, verifies; the same log with the serve's
// idle power moved (signed with the steward's key, appended past Seal) or
// naming a serve instead of the record is damaged at that serve.
func TestVerifyFollowsIdleRecords(t *testing.T) {
	ctx := context.Background()
	k, err := steward.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{6}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	// The span's quiet stretch: 5000 µJ over 10 ms, 500 000 µW.
	doc := steward.IdleDoc{Backend: "b", DurationMs: 9, Source: steward.IdleSourceSpan}.Encode()
	idleRec := steward.RecordDraft(steward.RecordIdle, doc, nil, "b", steward.IdleRecipe, "idle: 9 ms on ina226@i2c-1:0x40 (span)",
		wire.Measured(5000, 0), hwDraft(0).Metering)
	serve := func(i byte, idle, rec uint64) steward.Draft {
		d := hwDraft(i)
		d.Metering.IdleUW, d.IdleRecord = &idle, &rec
		return d
	}
	for _, c := range []struct {
		name string
		mut  func(*steward.Receipt)
		want steward.Reason
	}{
		{"honest", nil, ""},
		{"idle power moved", func(r *steward.Receipt) { *r.IdleUW = 499_000 }, steward.RefusedEvidence},
		{"names a serve", func(r *steward.Receipt) { *r.IdleRecord = 1 }, steward.RefusedRecord},
	} {
		t.Run(c.name, func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "receipts")
			l, _, err := steward.OpenLog(ctx, logPath, steward.LogOptions{Key: k})
			if err != nil {
				t.Fatal(err)
			}
			st := steward.New(k, l, steward.Options{})
			for _, d := range []steward.Draft{idleRec, serve(1, 500_000, 0)} {
				if _, err := st.Seal(ctx, d); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err = l.Append(ctx, func(seq uint64, prev *wire.ContentID) ([]byte, error) {
				r, err := steward.New(k, nil, steward.Options{}).Build(serve(2, 500_000, 0), seq, prev, make([]byte, steward.NonceSize), time.UnixMilli(1_767_225_600_000))
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
				return steward.Sign1(k, core)
			})
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			var out, errb bytes.Buffer
			err = run(ctx, []string{"verify", "-steward", k.ID(), logPath}, &out, &errb)
			if c.want == "" {
				if err != nil || !strings.Contains(out.String(), "log OK") {
					t.Fatalf("honest log refused: %v\n%s", err, out.String())
				}
				return
			}
			var ee *cli.ExitError
			if !errors.As(err, &ee) || ee.Code != exitDamaged || !strings.Contains(err.Error(), "sequence 2") ||
				!strings.Contains(err.Error(), "x_idle") || steward.ReasonOf(err) != c.want {
				t.Fatalf("tampered log: %v, want damage at sequence 2 [%s]", err, c.want)
			}
		})
	}
}

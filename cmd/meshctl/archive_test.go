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

// A log whose disk budget archived its first segments: verify names what
// left and where, checks the live log from its first checkpoint, and with
// -archive checks archive plus live log from genesis; a missing archived
// segment is damage.
func TestVerifyArchivedLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	logPath, arch := filepath.Join(dir, "receipts"), filepath.Join(dir, "archive")
	k, err := steward.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := steward.OpenLog(ctx, logPath, steward.LogOptions{Key: k, SegmentBytes: 4096, CheckpointEvery: 4, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	st := steward.New(k, l, steward.Options{})
	const n = 60
	for i := 0; i < n; i++ {
		if _, err := st.Seal(ctx, steward.Draft{
			Request: wire.ContentOf([]byte{byte(i)}), Backend: "b", Recipe: "r", Route: "why",
			Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Estimated(10),
			Metering: estimatorMetering,
		}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := steward.NewBudget(l, steward.BudgetOptions{MaxBytes: 1, ArchiveDir: arch})
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := b.Pass(ctx)
	if len(rep.Moved) < 2 {
		t.Fatalf("pass moved %d segments", len(rep.Moved))
	}
	l.Close()
	last := rep.Moved[len(rep.Moved)-1].Next

	var out, errb bytes.Buffer
	if err := run(ctx, []string{"verify", "-q", logPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "not in the live log: sequences 0..") || !strings.Contains(s, "archived in "+arch) || !strings.Contains(s, "are not checked here") {
		t.Fatalf("verify of the live log:\n%s", s)
	}
	out.Reset()
	if err := run(ctx, []string{"verify", "-q", "-steward", k.ID(), "-archive", arch, logPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "log OK: 60 receipts (60 verified from genesis, archive") {
		t.Fatalf("verify with the archive:\n%s", s)
	}
	// Lose an archived segment (not the first): a gap in the chain.
	mid := rep.Moved[1]
	if err := os.Remove(filepath.Join(arch, steward.ArchiveName(mid.First))); err != nil {
		t.Fatal(err)
	}
	err = run(ctx, []string{"verify", "-q", "-archive", arch, logPath}, &out, &errb)
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != exitDamaged || !strings.Contains(err.Error(), "missing from the archive") {
		t.Fatalf("verify with a segment missing from the archive (live from %d): %v", last, err)
	}
}

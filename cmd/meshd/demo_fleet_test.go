package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/steward"
)

// TestDemoFleetRunsEndToEnd runs `meshd demo-fleet` with a meshctl built
// for the test and checks the story it tells against what it left on
// disk: every node's chain verified from the stream at the head its own
// log has, the front door fell back from the stopped node, and the fleet
// report was written and verified.
func TestDemoFleetRunsEndToEnd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "meshctl")
	if out, err := exec.Command("go", "build", "-o", bin, "meshd/cmd/meshctl").CombinedOutput(); err != nil {
		t.Fatalf("building meshctl: %v\n%s", err, out)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	if err := run(ctx, []string{"demo-fleet", "-dir", dir, "-meshctl", bin}, &out, &errb); err != nil {
		t.Fatalf("demo-fleet failed: %v\n%s%s", err, out.String(), errb.String())
	}
	s := out.String()
	t.Logf("demo-fleet took %v", time.Since(start).Round(time.Millisecond))
	for _, want := range []string{
		// Forwarded serves name the upstream receipt, each node answered.
		"F1     node-a", "F2     node-b", "F3     node-c", "(its chain head)",
		// The fallback.
		"node-a stopped",
		"F1 serve: answered by node-b",
		"front door's backend node-a: unhealthy: remote node-a failed",
		// The fleet verifier and the report.
		"fleet verify: every chain verified (4 stewards",
		"fleet report written to " + filepath.Join(dir, "fleet-report.json"),
		"4 boards, ", "forwarded: 7 receipts, 7 checked against their upstream receipt",
		"every figure recomputed from the receipts",
		"attestation: meshd-fleet-report/v1 signed by the operator",
		"\n  OK\n",
		"fleet report verified",
		"not ranked: both are Estimator figures",
		"every node stopped cleanly",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("demo-fleet output lacks %q:\n%s", want, s)
		}
	}
	// Each node's row in the fleet verify table has no problem and the
	// head its own log ends at, read from disk after the demo stopped it.
	rows := map[string]string{}
	inTable := false
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "fleet verify (agent/fleet"):
			inTable = true
		case strings.HasPrefix(line, "fleet verify: "):
			inTable = false
		case inTable:
			if f := strings.Fields(line); len(f) > 0 {
				rows[f[0]] = line
			}
		}
	}
	for _, name := range []string{"node-a", "node-b", "node-c", "front-door"} {
		vr, err := steward.VerifyLog(context.Background(), filepath.Join(dir, name, "receipts"), steward.VerifyOptions{})
		if err != nil {
			t.Fatalf("%s's log: %v", name, err)
		}
		row := rows[name]
		if want := fmt.Sprintf("seq %d %s", vr.Records-1, vr.Head); !strings.Contains(row, want) || !strings.HasSuffix(strings.TrimSpace(row), "none") {
			t.Errorf("%s: fleet verify row %q, want head %q and no problem", name, row, want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"meshd/steward"
)

func TestDemoRunsEndToEnd(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", dir}, &out, &errb); err != nil {
		t.Fatalf("demo failed: %v\n%s%s", err, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{"ref-tiny", "ref-mid", "ref-large", "refused: none of 3 backends admissible", "Estimator", "served 5, refused 2", "log verified: 5 receipts"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "HwShunt") {
		t.Error("demo without hardware claims a hardware measurement")
	}
	// The log the demo left behind verifies independently, and a second
	// run appends to it rather than starting over.
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", dir}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	rep, err := steward.VerifyLogFile(filepath.Join(dir, "receipts.log"), nil, nil)
	if err != nil || rep.Records != 10 {
		t.Fatalf("demo log after two runs: %v %+v", err, rep)
	}
}

package witness_test

import (
	"context"
	"strings"
	"testing"

	"meshd/steward/witness"
	"meshd/steward/witness/swtpmtest"
)

func TestTPMCounter(t *testing.T) {
	ctx := context.Background()
	sock := swtpmtest.Start(t)
	w, err := witness.OpenTPM(ctx, sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Created() {
		t.Error("a fresh TPM: the counter should have been defined")
	}
	if _, written, err := w.Read(ctx); err != nil || written {
		t.Fatalf("fresh counter: written %v, err %v; want unwritten", written, err)
	}
	v0, err := w.Advance(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, written, err := w.Read(ctx); err != nil || !written || v != v0 {
		t.Fatalf("after the first increment: %d written %v err %v, want %d", v, written, err, v0)
	}
	v, err := w.Advance(ctx, v0+3)
	if err != nil || v != v0+3 {
		t.Fatalf("Advance(%d) = %d, %v", v0+3, v, err)
	}
	// Advancing to less than it holds changes nothing.
	if v, err := w.Advance(ctx, v0); err != nil || v != v0+3 {
		t.Fatalf("Advance(%d) on %d = %d, %v; want unchanged", v0, v0+3, v, err)
	}
	if _, err := w.Advance(ctx, v0+3+5000); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a jump of 5000: err %v, want a refusal", err)
	}
	if !strings.Contains(w.String(), "0x01004d53") {
		t.Errorf("String() = %q, want the index", w.String())
	}
	// Reopened, the counter is found, not defined again.
	w2, err := witness.OpenTPM(ctx, sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if w2.Created() {
		t.Error("reopened: the counter was defined again")
	}
	if v, _, err := w2.Read(ctx); err != nil || v != v0+3 {
		t.Fatalf("reopened: %d, %v; want %d", v, err, v0+3)
	}
}

func TestTPMRefusesBadIndex(t *testing.T) {
	if _, err := witness.OpenTPM(context.Background(), "/nonexistent", 0x02000000); err == nil || !strings.Contains(err.Error(), "not an NV index") {
		t.Fatalf("err %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// verify -envelope prints the route a receipt proves, and refuses one
// whose served backend is not the cheapest admissible, naming why.
func TestVerifyEnvelopePrintsTheRoute(t *testing.T) {
	vec := func(name string) string {
		return filepath.Join("..", "..", "conformance", "v1", "receipts", name, "envelope.hex")
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"verify", "-envelope", vec("routed")}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"candidates (floor F2, ceiling 50000 µJ):",
		`"node-a"             F2  est 20000 µJ       failed`,
		`"gguf-q4"            F2  est 30000 µJ       admissible  <- served`,
		`"gguf q8; F3 30000 admissible" F3  est 30000 µJ       admissible`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("verify output lacks %q:\n%s", want, out.String())
		}
	}
	err := run(context.Background(), []string{"verify", "-envelope", vec("route-not-cheapest")}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `"node-b" (est 25000 µJ) is admissible and ranks first`) {
		t.Fatalf("a route that is not the cheapest: %v", err)
	}
}

package main

import (
	"os"
	"testing"

	"meshd/internal/natschild"
)

// TestMain lets the test binary be the JetStream server a benchmark runs
// in a process of its own (natschild).
func TestMain(m *testing.M) {
	if code, ok := natschild.Serve(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

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
)

// verify refuses a directory that holds no log with its own status, and
// says where the log is when given a state directory.
func TestVerifyNotALog(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	k, err := steward.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{5}, 64)))
	if err != nil {
		t.Fatal(err)
	}
	receipts := filepath.Join(state, "receipts")
	l, _, err := steward.OpenLog(ctx, receipts, steward.LogOptions{Key: k})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	empty := t.TempDir()
	stray := t.TempDir()
	os.WriteFile(filepath.Join(stray, "notes.txt"), []byte("x"), 0o600)
	for _, tc := range []struct {
		name, path string
		code       int
		says       []string
	}{
		{"empty directory", empty, exitNotLog, []string{"not a log", empty}},
		{"directory of other files", stray, exitNotLog, []string{"not a log", stray}},
		{"state directory", state, exitNotLog, []string{"not a log", receipts}},
		{"the empty log itself", receipts, 0, []string{"log OK"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(ctx, []string{"verify", "-q", tc.path}, &out, &errb)
			code := 0
			var ee *cli.ExitError
			switch {
			case errors.As(err, &ee):
				code = ee.Code
			case err != nil:
				code = 1
			}
			if code != tc.code {
				t.Fatalf("status %d (%v), want %d", code, err, tc.code)
			}
			text := out.String()
			if err != nil {
				text = err.Error()
			}
			for _, s := range tc.says {
				if !strings.Contains(text, s) {
					t.Errorf("%q does not say %q", text, s)
				}
			}
		})
	}
}

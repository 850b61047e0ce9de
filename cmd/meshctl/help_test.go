package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"meshd/internal/buildinfo"
)

// -h on every subcommand is help, not a usage error (cli.Main exits 0 for
// flag.ErrHelp or nil), and the text lists the flags the subcommand takes.
func TestHelpListsFlags(t *testing.T) {
	tests := []struct {
		args []string
		says []string
	}{
		{[]string{"-h"}, []string{"verify", "probe", "serve", "version"}},
		{[]string{"help"}, []string{"keygen", "bench"}},
		{[]string{"verify", "-h"}, []string{"-steward", "-envelope", "-remote", "-addr", "-trust"}},
		{[]string{"verify", "-remote", "-h"}, []string{"-addr", "-trust"}},
		{[]string{"serve", "-h"}, []string{"-floor", "-ceiling", "-addr"}},
		{[]string{"probe", "-h"}, []string{"-hwmon"}},
		{[]string{"keygen", "--help"}, []string{"-o"}},
		{[]string{"grant", "-h"}, []string{"issue", "show", "verify"}},
		{[]string{"grant", "issue", "-h"}, []string{"-resource", "-expires"}},
		{[]string{"log", "-h"}, []string{"repair", "checkpoint"}},
		{[]string{"model", "help"}, []string{"synth", "info"}},
		{[]string{"fleet", "-h"}, []string{"verify", "report"}},
		{[]string{"bench", "-h"}, []string{"run", "compare"}},
		{[]string{"bench", "run", "-h"}, []string{"-workload", "-progress"}},
		{[]string{"receipts", "-h"}, []string{"tail"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, &out, &errb)
			if err != nil && !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("meshctl %v: %v, want help (nil or flag.ErrHelp)", tt.args, err)
			}
			text := out.String() + errb.String()
			for _, w := range tt.says {
				if !strings.Contains(text, w) {
					t.Errorf("meshctl %v lacks %q:\n%s", tt.args, w, text)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err != nil {
			t.Fatal(err)
		}
		if got, want := strings.TrimSpace(out.String()), buildinfo.Read().String(); got != want || !strings.Contains(got, "rev ") {
			t.Errorf("meshctl %v = %q, want %q", args, got, want)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"meshd/internal/buildinfo"
	"meshd/internal/testbin"
)

// Every way of asking for help or the version exits 0 from the built
// binary, and a subcommand's -h lists each of its flags.
func TestHelpAndVersionExitZero(t *testing.T) {
	bin := testbin.Build(t, "meshd/cmd/meshd")
	tests := []struct {
		args []string
		says []string // all on stdout+stderr
	}{
		{[]string{"-h"}, []string{"serve", "check-config", "demo", "demo-fleet", "version"}},
		{[]string{"--help"}, []string{"serve", "check-config"}},
		{[]string{"help"}, []string{"serve", "check-config"}},
		{[]string{"version"}, []string{"rev ", "go1.", "linux/"}},
		{[]string{"-version"}, []string{"rev "}},
		{[]string{"--version"}, []string{"rev "}},
		{[]string{"serve", "-h"}, []string{"-config"}},
		{[]string{"check-config", "--help"}, []string{"-config"}},
		{[]string{"demo", "-h"}, []string{"-keep", "-dir", "-meter", "-no-gguf", "-require-meter"}},
		{[]string{"demo-fleet", "-h"}, []string{"-meshctl"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, err := exec.Command(bin, tt.args...).CombinedOutput()
			if err != nil {
				t.Fatalf("meshd %v: %v\n%s", tt.args, err, out)
			}
			for _, w := range tt.says {
				if !bytes.Contains(out, []byte(w)) {
					t.Errorf("meshd %v lacks %q:\n%s", tt.args, w, out)
				}
			}
		})
	}
	// An unknown subcommand is still a usage error.
	err := exec.Command(bin, "teleport").Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("meshd teleport: %v, want exit 2", err)
	}
}

// `meshd version` prints the one build string the metric and /v1/node
// carry, and a subcommand's -h is flag.ErrHelp (cli.Main's exit 0).
func TestVersionString(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), buildinfo.Read().String(); got != want {
		t.Errorf("version = %q, want %q", got, want)
	}
	if err := run(context.Background(), []string{"serve", "-h"}, &out, &errb); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("serve -h: %v, want flag.ErrHelp", err)
	}
}

// meshd_build_info is exposed with the build in its labels, and /v1/node
// carries the same version string.
func TestBuildInfoMetricAndNodeVersion(t *testing.T) {
	td := startDaemon(t, refBackends, serveHooks{})
	in := buildinfo.Read()
	arch := strings.TrimPrefix(in.Platform(), in.OS+"/")
	_, m := td.get("/metrics")
	want := fmt.Sprintf(`meshd_build_info{arch=%q,go_version=%q,revision=%q,version=%q} 1`, arch, in.GoVersion, in.Rev(), in.Version)
	if !bytes.Contains(m, []byte(want)) {
		t.Errorf("metrics lack %s", want)
	}
	_, nb := td.get("/v1/node")
	var node struct{ Version string }
	if err := json.Unmarshal(nb, &node); err != nil {
		t.Fatal(err)
	}
	if node.Version != in.String() || !strings.Contains(node.Version, "rev "+in.Rev()) {
		t.Errorf("/v1/node version %q, want %q", node.Version, in.String())
	}
}

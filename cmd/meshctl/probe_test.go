package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbeCommandHwmon(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "hwmon4")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"name": "ina226", "in1_input": "12000", "curr1_input": "-500", "power1_input": "6000000"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	if err := cmdProbe(context.Background(), []string{"-hwmon", root, "-no-i2c"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// An hwmon power attribute is a point reading: the listing must say so.
	for _, want := range []string{"ina226", "hwmon4", " point ", "bus 12.000 V", "current -0.5000 A", "power -6.0000 W"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

func TestProbeCommandNothing(t *testing.T) {
	var out, errb bytes.Buffer
	err := cmdProbe(context.Background(), []string{"-hwmon", t.TempDir()}, &out, &errb)
	if err != nil {
		t.Fatalf("finding nothing is not an error: %v", err)
	}
	if !strings.Contains(out.String(), "no power sensors found") {
		t.Fatalf("output:\n%s", out.String())
	}
	if _, statErr := os.Stat("/dev/i2c-0"); statErr != nil && !strings.Contains(out.String(), "no I2C bus") {
		t.Fatalf("machine without /dev/i2c-* not reported:\n%s", out.String())
	}
}

// Where NVML is absent the listing says so, naming the library.
func TestProbeCommandNVMLAbsent(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libnvidia-ml.so.1")
	var out, errb bytes.Buffer
	if err := cmdProbe(context.Background(), []string{"-hwmon", t.TempDir(), "-no-i2c", "-nvml", lib}, &out, &errb); err != nil {
		t.Fatalf("a machine without NVML is not an error: %v", err)
	}
	// The wording is drivers/nvml's (it differs in a -tags nonvml build).
	if want := "nvml: "; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), lib) {
		t.Fatalf("output lacks %q naming %s:\n%s", want, lib, out.String())
	}
}

func TestProbeCommandUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if err := cmdProbe(context.Background(), []string{"stray"}, &out, &errb); err == nil {
		t.Fatal("stray argument accepted")
	}
}

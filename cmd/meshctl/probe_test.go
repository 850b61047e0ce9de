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

// On a machine with nothing, probe names each kind it looked for and why
// each found nothing.
func TestProbeCommandNothing(t *testing.T) {
	var out, errb bytes.Buffer
	empty := t.TempDir()
	lib := filepath.Join(empty, "libnvidia-ml.so.1")
	err := cmdProbe(context.Background(), []string{"-hwmon", empty, "-rapl", empty, "-nvml", lib, "-no-i2c"}, &out, &errb)
	if err != nil {
		t.Fatalf("finding nothing is not an error: %v", err)
	}
	got := out.String()
	for _, want := range []string{
		"no power sensors found",
		"I2C INA219/INA226: none: skipped (-no-i2c)",
		"hwmon rails:      none: no hwmon device under " + empty,
		"RAPL:             none: no powercap zone with an energy counter under " + empty,
		"NVML:             none: ",
		"serial meters:    none: none named",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	// NVML's line says why: the library named could not be loaded.
	if !strings.Contains(got, "nvml") || !strings.Contains(got, "libnvidia-ml.so.1") {
		t.Errorf("NVML line does not say what it tried:\n%s", got)
	}
}

func TestProbeCommandNoI2CBus(t *testing.T) {
	if _, err := os.Stat("/dev/i2c-0"); err == nil {
		t.Skip("this machine has an I2C bus")
	}
	var out, errb bytes.Buffer
	empty := t.TempDir()
	if err := cmdProbe(context.Background(), []string{"-hwmon", empty, "-rapl", empty, "-nvml", filepath.Join(empty, "x.so")}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "I2C INA219/INA226: none: no I2C bus on this machine") {
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

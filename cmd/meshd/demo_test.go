package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

// TestDemoWithHwmonMeter meters the demo with a kernel rail faked at the
// sysfs level: every receipt must carry the meter's name and a metered
// provenance, and the charged figure must match the rail's 18 W.
func TestDemoWithHwmonMeter(t *testing.T) {
	root := t.TempDir()
	rail := filepath.Join(root, "hwmon0")
	if err := os.MkdirAll(rail, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{
		"name": "ina226", "in1_input": "12000", "curr1_input": "1500", "power1_input": "18000000",
		"update_interval": "10", "shunt_resistor": "10000",
	} {
		if err := os.WriteFile(filepath.Join(rail, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"demo", "-no-gguf", "-dir", dir, "-meter", "hwmon:hwmon0/ina226:1", "-hwmon-root", root}
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("demo: %v\n%s%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "metering every engine call with hwmon:hwmon0/ina226:1") {
		t.Fatalf("demo does not say what meters it:\n%s", out.String())
	}
	n, metered := 0, 0
	_, err := steward.VerifyLogFile(filepath.Join(dir, "receipts.log"), nil, func(o *steward.Opened) error {
		n++
		r := o.Receipt
		if r.EnergyProvenance == "Estimator" {
			// The sampler missed the window's close by more than two update
			// periods (a loaded machine): an honest estimate, never a zero.
			if r.MeasuredUJ != nil || r.Meter != "estimator" {
				return fmt.Errorf("receipt %d: Estimator receipt claims meter %q / measurement %v", r.Sequence, r.Meter, r.MeasuredUJ)
			}
			return nil
		}
		metered++
		if r.Meter != "hwmon:hwmon0/ina226:1" || r.ErrorUJ == nil {
			return fmt.Errorf("receipt %d: metered by %q with error bound %v", r.Sequence, r.Meter, r.ErrorUJ)
		}
		e, err := r.Energy()
		if err != nil {
			return err
		}
		want := 18.0 * float64(r.WindowNs) / 1e3
		if d := float64(e.UJ()) - want; d*d > float64(*r.ErrorUJ+1)*float64(*r.ErrorUJ+1) {
			t.Errorf("receipt %d: %d µJ over %d ns, 18 W gives %.0f (bound %d)", r.Sequence, e.UJ(), r.WindowNs, want, *r.ErrorUJ)
		}
		return nil
	})
	if err != nil || n != 5 || metered == 0 {
		t.Fatalf("log: %v, %d receipts, %d metered", err, n, metered)
	}
	if err := run(context.Background(), []string{"demo", "-no-gguf", "-dir", t.TempDir(), "-meter", "hwmon:nope", "-hwmon-root", root}, &out, &errb); err == nil || !strings.Contains(err.Error(), `no hwmon rail "nope"`) {
		t.Fatalf("unknown rail: %v", err)
	}
}

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A Jetson's INA3221 rails: VDD_CPU_GPU_CV is fed from VDD_IN. Undeclared,
// the daemon refuses to start, naming the pair; declared inside, it starts.
func TestNestedMetersBreakdown(t *testing.T) {
	root := hwmonFixture(t)
	meters := "[metering]\non_meter_failure = \"estimate\"\n\n" +
		"[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"VDD_IN\"\nhwmon_root = \"" + root + "\"\n" +
		"[[meter]]\nname = \"cpu\"\ndriver = \"hwmon\"\nrail = \"VDD_CPU_GPU_CV\"\nhwmon_root = \"" + root + "\"\n"

	dir := t.TempDir()
	path := filepath.Join(dir, "meshd.toml")
	bad := "[steward]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n[listen]\ntcp = [\"127.0.0.1:0\"]\n\n" + meters + refBackends + "meters = [\"vdd\", \"cpu\"]\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	err := runServeWith(context.Background(), []string{"-config", path}, &logs, serveHooks{})
	if err == nil || !strings.Contains(err.Error(), `meters "vdd" and "cpu" may measure the same energy`) {
		t.Fatalf("undeclared nested meters: %v", err)
	}

	// Declared inside, the daemon starts and /v1/meters says so; what the
	// span charges and shows as the breakdown is the span battery's
	// (shunt/span_battery_test.go): this fixture's static rails measure no
	// window.
	nested := strings.Replace(meters, "rail = \"VDD_CPU_GPU_CV\"\n", "rail = \"VDD_CPU_GPU_CV\"\ninside = \"vdd\"\n", 1)
	td := startDaemon(t, nested+refBackends+"meters = [\"vdd\", \"cpu\"]\n", serveHooks{})
	_, body := td.get("/v1/meters")
	var v struct {
		Meters []struct {
			Name   string
			Inside string
		}
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Meters) != 2 {
		t.Fatalf("meters: %v %s", err, body)
	}
	for _, m := range v.Meters {
		if want := map[string]string{"cpu": "vdd", "vdd": ""}[m.Name]; m.Inside != want {
			t.Fatalf("meter %s inside %q, want %q: %s", m.Name, m.Inside, want, body)
		}
	}
}

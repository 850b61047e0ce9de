package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api"
	"meshd/steward"
)

// What a benchmark harness reads from the daemon: the inventory, an idle
// window, a checkpoint that anchors the run, no attestation of a digest,
// and the live stream.
func TestBenchEndpoints(t *testing.T) {
	meter := "[metering]\non_meter_failure = \"estimate\"\n\n[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"VDD_IN\"\nhwmon_root = \"" + hwmonFixture(t) + "\"\n"
	td := startDaemon(t, meter+refBackends+"meters = [\"vdd\"]\n", serveHooks{})

	_, body := td.get("/v1/node")
	var n struct {
		Steward string
		Board   api.Board
		Meters  []map[string]any
	}
	if err := json.Unmarshal(body, &n); err != nil || n.Board.Cores < 1 || n.Board.Kernel == "" || len(n.Meters) != 1 || n.Meters[0]["driver"] != "hwmon" {
		t.Fatalf("node: %v %s", err, body)
	}
	pub, _ := steward.ParsePublicKey(n.Steward)

	if resp, _ := td.get("/v1/chain/checkpoint"); resp.StatusCode != 404 {
		t.Fatalf("checkpoint of an empty log: %d", resp.StatusCode)
	}

	// The live stream: a power event first, then the receipt of a serve.
	resp, err := http.Get(td.base + "/v1/live?interval_ms=50")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	next := func() (string, string) {
		var ev string
		for sc.Scan() {
			line := sc.Text()
			if e, ok := strings.CutPrefix(line, "event: "); ok {
				ev = e
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				return ev, d
			}
		}
		t.Fatalf("live stream ended: %v", sc.Err())
		return "", ""
	}
	if ev, d := next(); ev != "power" || !strings.Contains(d, `"vdd"`) {
		t.Fatalf("first live event %s %s", ev, d)
	}
	if r, b := td.post("/v1/serve", map[string]any{"prompt": "watch me", "max_tokens": 3, "fidelity_floor": 3, "joule_ceiling_uj": 1000000}); r.StatusCode != 200 {
		t.Fatalf("serve: %s", b)
	}
	for {
		ev, d := next()
		if ev == "receipt" {
			if !strings.Contains(d, `"backend":"ref-mid"`) || !strings.Contains(d, `"sequence":0`) {
				t.Fatalf("receipt event %s", d)
			}
			break
		}
	}

	// A checkpoint now anchors that receipt.
	resp2, env := td.get("/v1/chain/checkpoint")
	cp, err := steward.OpenCheckpoint(env, pub)
	if resp2.StatusCode != 200 || err != nil || cp.Count != 1 {
		t.Fatalf("checkpoint: %d %v", resp2.StatusCode, err)
	}

	// An idle window on the metered backend goes through the span like a
	// serve's. The fixture's point readings never change, so the driver
	// soon calls them stale: the honest answer may be that the meter
	// measured nothing, and it must never be a hardware claim.
	r, b := td.post("/v1/meters/idle", map[string]any{"backend": "ref-mid", "seconds": 0.2})
	var idle struct {
		Provenance string
		WindowNs   uint64 `json:"window_ns"`
		Meter      string
	}
	json.Unmarshal(b, &idle)
	switch {
	case r.StatusCode == 200 && idle.WindowNs >= 200_000_000 && idle.Provenance == "ModelBased":
	case r.StatusCode == 503 && strings.Contains(string(b), "measured nothing"):
	default:
		t.Fatalf("idle window: %d %s", r.StatusCode, b)
	}
	if r, b := td.post("/v1/meters/idle", map[string]any{"backend": "ref-tiny", "seconds": 0.1}); r.StatusCode != 400 || !strings.Contains(string(b), `"param":"backend"`) {
		t.Fatalf("idle on an unmetered backend: %d %s", r.StatusCode, b)
	}

	// Nothing signs a digest the caller chose: the report's figures
	// follow from the sealed chain, so there is no attest endpoint.
	sum := sha256.Sum256([]byte("a report"))
	if r, b := td.post("/v1/attest", map[string]any{"purpose": "meshd-bench-report/v1", "sha256": hex.EncodeToString(sum[:])}); r.StatusCode != 404 && r.StatusCode != 405 {
		t.Fatalf("POST /v1/attest answered %d %s: the daemon still signs arbitrary digests", r.StatusCode, b)
	}
}

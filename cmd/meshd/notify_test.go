package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket is a fake service manager: the unixgram socket systemd
// gives a Type=notify service.
type notifySocket struct {
	t    *testing.T
	conn *net.UnixConn
	path string
}

func newNotifySocket(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &notifySocket{t: t, conn: conn, path: path}
}

// next is the next datagram, waiting up to a generous deadline.
func (n *notifySocket) next() string {
	n.t.Helper()
	n.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	k, err := n.conn.Read(buf)
	if err != nil {
		n.t.Fatalf("no notification: %v", err)
	}
	return string(buf[:k])
}

// pending is a datagram already queued, or "" when none: a datagram is in
// the socket's buffer as soon as the sender's write returns.
func (n *notifySocket) pending() string {
	n.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	buf := make([]byte, 4096)
	k, err := n.conn.Read(buf)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ""
	}
	if err != nil {
		n.t.Fatal(err)
	}
	return string(buf[:k])
}

func (n *notifySocket) env(extra map[string]string) func(string) string {
	m := map[string]string{"NOTIFY_SOCKET": n.path}
	for k, v := range extra {
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// hwmonFixture is a copy of the checked-in sysfs tree whose rails publish
// an update interval of 300 ms. Its values never change, so the driver
// soon calls a rail stale; what these tests assert holds either way, and
// the first reading, which opening the meter waits for, is always fresh.
func hwmonFixture(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("../../drivers/hwmon/testdata/hwmon")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "hwmon")
	if err := os.CopyFS(root, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	matches, _ := filepath.Glob(filepath.Join(root, "*", "update_interval"))
	for _, m := range matches {
		if err := os.WriteFile(m, []byte("300\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// READY=1 is sent only once the log, the ledger, the engines and the
// meters are up; then the watchdog is fed while the node is alive and
// starves once a meter's sampler has stopped.
func TestNotifyReadyAndWatchdog(t *testing.T) {
	ns := newNotifySocket(t)
	tick := make(chan time.Time)
	meter := "[metering]\non_meter_failure = \"estimate\"\n\n[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"VDD_IN\"\nhwmon_root = \"" + hwmonFixture(t) + "\"\n"
	td := startDaemon(t, meter+refBackends+"meters = [\"vdd\"]\n", serveHooks{
		getenv: ns.env(map[string]string{"WATCHDOG_USEC": "2000000"}),
		tick:   func(time.Duration) <-chan time.Time { return tick },
	})
	first := ns.next()
	if !strings.HasPrefix(first, "STATUS=opening") {
		t.Fatalf("first notification %q, want the opening status", first)
	}
	ready := ns.next()
	if !strings.HasPrefix(ready, "READY=1\n") || !strings.Contains(ready, "STATUS=serving 2 backends, 1 meters") {
		t.Fatalf("ready notification %q", ready)
	}
	// By the time READY=1 was sent everything it promises exists.
	if _, err := os.Stat(filepath.Join(td.dir, "state", "receipts")); err != nil {
		t.Fatalf("READY before the log was open: %v", err)
	}
	if resp, _ := td.get("/readyz"); resp.StatusCode != 200 {
		t.Fatalf("/readyz %d after READY", resp.StatusCode)
	}
	tick <- time.Now()
	if got := ns.next(); got != "WATCHDOG=1\n" && got != "WATCHDOG=1" {
		t.Fatalf("watchdog ping %q", got)
	}
	// A meter whose sampler stopped: the node is not alive, the watchdog
	// is not fed, and /readyz says why.
	td.d.node.Meters()[0].Meter.Close()
	tick <- time.Now()
	tick <- time.Now() // the first check has finished once the second is taken
	if got := ns.pending(); got != "" {
		t.Fatalf("watchdog fed while a meter is dead: %q", got)
	}
	if resp, body := td.get("/readyz"); resp.StatusCode != 503 || !strings.Contains(string(body), "sampler stopped") {
		t.Fatalf("/readyz with a dead meter: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(td.logs.String(), "watchdog not fed") {
		t.Fatalf("the stall was not logged:\n%s", td.logs.String())
	}
	td.stop()
	if got := ns.next(); !strings.HasPrefix(got, "STOPPING=1") {
		t.Fatalf("stop notification %q", got)
	}
}

// A meter that cannot be opened keeps the daemon from starting, and
// READY=1 is never sent.
func TestNotifyNoReadyWithoutMeters(t *testing.T) {
	ns := newNotifySocket(t)
	dir := t.TempDir()
	cfg := "[steward]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n[listen]\ntcp = [\"127.0.0.1:0\"]\n\n" +
		"[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"NO_SUCH_RAIL\"\nhwmon_root = \"" + hwmonFixture(t) + "\"\n" + refBackends + "meters = [\"vdd\"]\n"
	path := filepath.Join(dir, "meshd.toml")
	os.WriteFile(path, []byte(cfg), 0o600)
	var logs syncBuffer
	err := runServeWith(context.Background(), []string{"-config", path}, &logs, serveHooks{getenv: ns.env(nil)})
	// Refused before anything is opened, at the key that names the rail.
	if err == nil || !strings.Contains(err.Error(), `:9:1: meter[0].rail: no hwmon rail "NO_SUCH_RAIL"`) {
		t.Fatalf("daemon with a missing meter: %v", err)
	}
	for {
		got := ns.pending()
		if got == "" {
			break
		}
		if strings.Contains(got, "READY=1") {
			t.Fatalf("READY=1 sent although a meter never delivered: %q", got)
		}
	}
}

// /v1/meters shows each meter's live reading, health, and the newest
// window sealed on a span it belongs to.
func TestMetersEndpoint(t *testing.T) {
	meter := "[metering]\non_meter_failure = \"estimate\"\n\n[[meter]]\nname = \"vdd\"\ndriver = \"hwmon\"\nrail = \"VDD_IN\"\nhwmon_root = \"" + hwmonFixture(t) + "\"\n"
	td := startDaemon(t, meter+refBackends+"meters = [\"vdd\"]\n", serveHooks{})
	if resp, body := td.post("/v1/serve", map[string]any{"prompt": "metered", "max_tokens": 2, "fidelity_floor": 3, "joule_ceiling_uj": 1000000}); resp.StatusCode != 200 {
		t.Fatalf("serve: %s", body)
	}
	_, body := td.get("/v1/meters")
	var v struct {
		Meters []struct {
			Name           string
			Driver         string
			Kind           string
			BestProvenance string `json:"best_provenance"`
			PowerUW        *int64 `json:"power_uw"`
			Readings       uint64
			LastWindow     *struct {
				Sequence uint64
				Backend  string
			} `json:"last_window"`
		}
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Meters) != 1 {
		t.Fatalf("meters: %v %s", err, body)
	}
	m := v.Meters[0]
	if m.Name != "vdd" || m.Driver != "hwmon" || m.BestProvenance != "ModelBased" || m.PowerUW == nil || m.Readings == 0 ||
		m.LastWindow == nil || m.LastWindow.Backend != "ref-mid" || m.LastWindow.Sequence != 0 {
		t.Fatalf("meter row: %s", body)
	}
}

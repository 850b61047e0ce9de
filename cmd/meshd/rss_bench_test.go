package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"meshd/internal/testbin"
)

// rssTargetMiB is what meshd itself may hold resident, idle or under 50
// clients: a 512 MB board keeps the rest for the engine and the model.
const rssTargetMiB = 64

// rssSeconds is how long BenchmarkResidentMemory keeps its 50 clients
// busy: MESHD_RSS_SECONDS, default 3 (a soak takes e.g. 180).
func rssSeconds(b *testing.B) time.Duration {
	s := os.Getenv("MESHD_RSS_SECONDS")
	if s == "" {
		return 3 * time.Second
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		b.Fatalf("MESHD_RSS_SECONDS=%q: want a positive number of seconds", s)
	}
	return time.Duration(n * float64(time.Second))
}

// BenchmarkResidentMemory runs the built meshd (reference backend) as its
// own process and reads its VmRSS from /proc/PID/status: idle once ready,
// then the most while 50 keep-alive clients serve for rssSeconds. It
// reports both in MiB (and the serves/s it sustained) and fails when
// either passes rssTargetMiB. The figure is the daemon's alone: the
// clients run in the benchmark's process.
func BenchmarkResidentMemory(b *testing.B) {
	if raceEnabled() {
		b.Skip("the race detector multiplies memory")
	}
	const clients = 50
	dur := rssSeconds(b)
	bin := testbin.Build(b, "meshd/cmd/meshd")
	dir := b.TempDir()
	cfg := filepath.Join(dir, "meshd.toml")
	doc := fmt.Sprintf("[steward]\nstate_dir = %q\n\n[listen]\ntcp = [\"127.0.0.1:0\"]\nmax_in_flight = 256\n\n[log]\nformat = \"json\"\n%s", filepath.Join(dir, "state"), loadBackends)
	if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		idle, peak, rate, errs := residentRun(b, bin, cfg, clients, dur)
		b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "50clients-MiB")
		b.ReportMetric(rate, "serves/s")
		b.ReportMetric(rssTargetMiB, "target-MiB")
		if errs > 0 {
			b.Errorf("%d serves failed", errs)
		}
		if idle > rssTargetMiB<<20 || peak > rssTargetMiB<<20 {
			b.Errorf("meshd resident %s idle, %s at most under %d clients: over the %d MiB target", mib(idle), mib(peak), clients, rssTargetMiB)
		}
	}
}

// residentRun starts meshd, measures it and stops it with SIGTERM.
func residentRun(b *testing.B, bin, cfg string, clients int, dur time.Duration) (idle, peak uint64, rate float64, errs int64) {
	cmd := exec.Command(bin, "serve", "-config", cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	var logs bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var l struct{ Msg, Addr, Network string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" && l.Network == "tcp" {
				addr <- l.Addr
			}
		}
		io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			b.Errorf("meshd did not stop cleanly: %v", err)
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-exited:
		exited <- err
		b.Fatalf("meshd exited before listening: %v\n%s", err, logs.String())
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	defer hc.CloseIdleConnections()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		resp, err := hc.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("meshd not ready: %v", err)
		}
	}
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	if idle, err = rssOf(status); err != nil {
		b.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer cancel()
	rss := sampleRSS(status, 100*time.Millisecond)
	var served, failed atomic.Int64
	deadline := time.Now().Add(dur)
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline); i++ {
				body := fmt.Sprintf(`{"prompt":"rss client %d serve %d","max_tokens":4,"joule_ceiling_uj":1000000}`, c, i)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/serve", bytes.NewReader([]byte(body)))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				served.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	samples, err := rss.end()
	if err != nil {
		b.Fatal(err)
	}
	return idle, slices.Max(samples), float64(served.Load()) / elapsed.Seconds(), failed.Load()
}

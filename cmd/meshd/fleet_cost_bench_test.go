package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"meshd/internal/natschild"
)

// BenchmarkFleetCostPerServe is what the fleet publisher adds to a serve's
// daemon overhead, fleet on against fleet off in the same run: two daemons
// in this process, each in front of its own mesh-gguf child, one with
// [fleet] publishing every receipt to a JetStream server (file storage) in
// a process of its own, as a fleet's server is on a machine of its own.
// Reps of serves through HTTP alternate between the two, the order
// alternating too; after each on rep the publisher catches up, and the off
// rep waits as long after its own serves, the same way, so that what the
// process burns while waiting is charged to both alike. Between reps, pairs of the same serve
// through the off daemon and straight to its child measure the daemon's
// cost per serve (as BenchmarkDaemonCostPerServe does), the overhead the
// fleet's share is taken of.
//
// Reported: fleet-added-cpu-µs, the median over reps of this process's CPU
// per serve on less off (the publisher, its NATS client, the receipts'
// notifications: everything the fleet costs the node, the server's CPU
// being elsewhere); daemon-cost-µs, the median pair difference; and
// fleet-share-%, the first over the second. Goal: < 5 %. Also printed:
// the daemon process's CPU on/off ratio (its CPU per serve holds the
// benchmark's HTTP client too, so the ratio understates the share a
// little) and the wall on/off ratio.
func BenchmarkFleetCostPerServe(b *testing.B) {
	url := natschild.Start(b)
	on, onChild, _ := ggufDaemon(b, fmt.Sprintf("\n[fleet]\nurl = %q\n", url))
	off, offChild, _ := ggufDaemon(b, "")
	pub := on.node.Publisher()
	if pub == nil {
		b.Fatal("the fleet daemon has no publisher")
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	defer hc.CloseIdleConnections()
	const maxTokens = 4
	post := func(url string, body []byte, want string) time.Duration { return timedPost(b, hc, url, body, want) }
	serial := 0
	serve := func(d *daemon) time.Duration {
		serial++
		body, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("the fleet's share %d", serial), "max_tokens": maxTokens})
		return post("http://"+d.addrs[0].String()+"/v1/serve", body, `"envelope":`)
	}
	straight := func(child string) time.Duration {
		serial++
		body, _ := json.Marshal(map[string]any{"prompt": fmt.Sprintf("the fleet's share %d", serial), "n_predict": maxTokens, "cache_prompt": true,
			"temperature": 0, "seed": 0, "return_tokens": true})
		return post(child+"/completion", body, `"tokens_predicted"`)
	}
	caughtUp := func() bool { return pub.Status().Next == on.node.Stores.Log.Durable() }
	for range 20 { // connections, the children's caches, the logs, the stream
		serve(on)
		serve(off)
		straight(onChild)
		straight(offChild)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !caughtUp() {
		if time.Now().After(deadline) {
			b.Fatalf("the publisher did not catch up: %+v", pub.Status())
		}
		time.Sleep(time.Millisecond)
	}

	const serves, pairs = 192, 16
	// waits is how many polls the last on rep's catch-up took; the off rep
	// polls as many times after its own serves (the same check, the same
	// sleeps), so that waiting costs both alike and only the publisher's
	// work shows in the difference.
	waits := 0
	rep := func(d *daemon) (wall, cpu time.Duration) {
		c0, t0 := processCPU(), time.Now()
		for range serves {
			serve(d)
		}
		wall = time.Since(t0)
		if d == on {
			deadline := time.Now().Add(30 * time.Second)
			for waits = 0; !caughtUp(); waits++ {
				if time.Now().After(deadline) {
					b.Fatalf("the publisher did not catch up: %+v", pub.Status())
				}
				time.Sleep(time.Millisecond)
			}
		} else {
			for range waits {
				_ = caughtUp()
				time.Sleep(time.Millisecond)
			}
		}
		return wall, processCPU() - c0
	}
	var added, cpuRatios, wallRatios, offCPU, cost []float64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		var wOn, cOn, wOff, cOff time.Duration
		if i%2 == 0 {
			wOn, cOn = rep(on)
			wOff, cOff = rep(off)
		} else {
			wOff, cOff = rep(off)
			wOn, cOn = rep(on)
		}
		added = append(added, float64((cOn-cOff).Nanoseconds())/1e3/serves)
		offCPU = append(offCPU, float64(cOff.Nanoseconds())/1e3/serves)
		cpuRatios = append(cpuRatios, float64(cOn)/float64(cOff))
		wallRatios = append(wallRatios, float64(wOn)/float64(wOff))
		for j := range pairs {
			var dt, st time.Duration
			if j%2 == 0 {
				dt, st = serve(off), straight(offChild)
			} else {
				st, dt = straight(offChild), serve(off)
			}
			cost = append(cost, float64((dt-st).Nanoseconds())/1e3)
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		if n := len(s); n%2 == 1 {
			return s[n/2]
		} else {
			return (s[n/2-1] + s[n/2]) / 2
		}
	}
	a, c := med(added), med(cost)
	share := 100 * a / c
	verdict := "met"
	if share >= 5 {
		verdict = "NOT met"
	}
	b.ReportMetric(a, "fleet-added-cpu-µs")
	b.ReportMetric(c, "daemon-cost-µs")
	b.ReportMetric(share, "fleet-share-%")
	if b.N > 1 {
		fmt.Printf("fleet on vs off over %d reps of %d serves: the publisher adds %.1f µs of CPU per serve (median over reps); the daemon's cost per serve %.0f µs (median of %d pairs); share %.1f %%, goal < 5 %%: %s\n",
			len(added), serves, a, c, len(cost), share, verdict)
		fmt.Printf("  this process's CPU per serve, fleet off: %.1f µs; CPU on/off median %.3f; wall on/off median %.3f\n",
			med(offCPU), med(cpuRatios), med(wallRatios))
	}
}

// processCPU is the CPU this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

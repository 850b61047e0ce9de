package fleet

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkVerifierVsEd25519 measures the fleet verifier against bare
// Ed25519 verification of the same envelopes, in the same run, in
// interleaved repetitions (alternating which goes first) so that load from
// elsewhere hits both alike:
//
//   - per-core: Verifier with one partition, fed on one goroutine, against
//     ed25519.Verify of each envelope's Sig_structure on one goroutine,
//     alternating every chunk of envelopes within a repetition (the order
//     alternating too), so that a burst of load from elsewhere on a
//     shared machine falls on both alike rather than on one whole run;
//   - N cores: Verifier with GOMAXPROCS partitions against GOMAXPROCS
//     goroutines of bare verification;
//   - scaling: the one-partition time over the N-partition time.
//
// Each ratio is bare time / verifier time (the fraction of bare Ed25519's
// rate the verifier keeps), the median over repetitions. Goal: per-core
// >= 0.8, and scaling close to GOMAXPROCS.
//
//	go test ./agent/fleet -run '^$' -bench VerifierVsEd25519 -benchtime 10x
func BenchmarkVerifierVsEd25519(b *testing.B) {
	const stewards, chainLen, batch, chunk = 64, 16, 500, 32
	ids, chains := benchChains(b, stewards, chainLen)
	var (
		msgs []Message
		pubs []ed25519.PublicKey
		tbss [][]byte
		sigs [][]byte
	)
	for seq := range chainLen {
		for i, id := range ids {
			env := chains[i][seq]
			m := msg(id, uint64(seq), env)
			m.StreamSeq = uint64(len(msgs) + 1)
			msgs = append(msgs, m)
			pub, tbs, sig := sigStructure(b, env)
			pubs, tbss, sigs = append(pubs, pub), append(tbss, tbs), append(sigs, sig)
		}
	}
	n := runtime.GOMAXPROCS(0)
	bare := func(workers int) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for j := w; j < len(tbss); j += workers {
					if !ed25519.Verify(pubs[j], tbss[j], sigs[j]) {
						panic("bare verify failed")
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	verify := func(workers int) time.Duration {
		v := NewVerifier(VerifierConfig{Trusted: ids, Workers: workers})
		start := time.Now()
		for i := 0; i < len(msgs); i += batch {
			v.FeedBatch(msgs[i:min(i+batch, len(msgs))])
		}
		d := time.Since(start)
		if r := v.Report(); !r.OK() || r.Stewards[0].Count != chainLen {
			b.Fatalf("verifier: %d problems, count %d", r.ProblemCount(), r.Stewards[0].Count)
		}
		return d
	}
	// perCoreRep is one repetition of the per-core comparison: a fresh
	// verifier and bare verification take turns, chunk by chunk.
	perCoreRep := func(i int) (tb, tv, cb, cv time.Duration) {
		// Both run on this goroutine, held to one thread, so that the
		// thread's CPU time is each one's own.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		v := NewVerifier(VerifierConfig{Trusted: ids, Workers: 1})
		for k := 0; k < len(msgs); k += chunk {
			e := min(k+chunk, len(msgs))
			b0 := func() {
				start, c0 := time.Now(), threadCPU()
				for j := k; j < e; j++ {
					if !ed25519.Verify(pubs[j], tbss[j], sigs[j]) {
						panic("bare verify failed")
					}
				}
				tb += time.Since(start)
				cb += threadCPU() - c0
			}
			v0 := func() {
				start, c0 := time.Now(), threadCPU()
				v.FeedBatch(msgs[k:e])
				tv += time.Since(start)
				cv += threadCPU() - c0
			}
			if (i+k/chunk)%2 == 0 {
				b0()
				v0()
			} else {
				v0()
				b0()
			}
		}
		if r := v.Report(); !r.OK() || r.Stewards[0].Count != chainLen {
			b.Fatalf("verifier: %d problems, count %d", r.ProblemCount(), r.Stewards[0].Count)
		}
		return tb, tv, cb, cv
	}
	pair := func(i int, a, c func() time.Duration) (time.Duration, time.Duration) {
		if i%2 == 0 {
			x := a()
			return x, c()
		}
		y := c()
		return a(), y
	}
	var perCore, perCoreCPU, multi, scaling []float64
	var bare1, ver1, bareCPU, verCPU time.Duration
	cpu := func(f func(int) time.Duration, w int, sum *time.Duration) func() time.Duration {
		return func() time.Duration {
			c0 := cpuTime()
			d := f(w)
			*sum += cpuTime() - c0
			return d
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		tb, tv, cb, cv := perCoreRep(i)
		if cb > 0 && cv > 0 {
			perCoreCPU = append(perCoreCPU, float64(cb)/float64(cv))
		}
		// The CPU of each, from whole runs (getrusage counts the
		// process, so the two cannot share a run).
		pair(i, cpu(bare, 1, &bareCPU), cpu(verify, 1, &verCPU))
		tbN, tvN := pair(i+1, func() time.Duration { return bare(n) }, func() time.Duration { return verify(n) })
		perCore = append(perCore, float64(tb)/float64(tv))
		multi = append(multi, float64(tbN)/float64(tvN))
		scaling = append(scaling, float64(tv)/float64(tvN))
		bare1 += tb
		ver1 += tv
	}
	b.StopTimer()
	reps := len(perCore)
	pc, pcc, mc, sc := median(perCore), median(perCoreCPU), median(multi), median(scaling)
	fmt.Fprintf(os.Stdout, "verifier vs bare ed25519: %d envelopes (%d stewards x %d), %d reps, GOMAXPROCS %d\n", len(msgs), stewards, chainLen, reps, n)
	fmt.Fprintf(os.Stdout, "verifier vs bare ed25519: per core (1 vs 1 goroutine): %.3f of bare; bare %.1f µs/envelope, verifier %.1f µs/envelope\n",
		pc, float64(bare1.Microseconds())/float64(reps*len(msgs)), float64(ver1.Microseconds())/float64(reps*len(msgs)))
	// CPU time (getrusage, the whole process) says what a core does on a
	// machine shared with other work, where wall time also counts waits.
	fmt.Fprintf(os.Stdout, "verifier vs bare ed25519: per core by the thread's CPU time (the same chunks): %.3f of bare\n", pcc)
	fmt.Fprintf(os.Stdout, "verifier vs bare ed25519: CPU per envelope on one goroutine: bare %.1f µs, verifier %.1f µs (%.0f msgs/s per core)\n",
		float64(bareCPU.Microseconds())/float64(reps*len(msgs)), float64(verCPU.Microseconds())/float64(reps*len(msgs)),
		float64(reps*len(msgs))/verCPU.Seconds())
	fmt.Fprintf(os.Stdout, "verifier vs bare ed25519: %d vs %d goroutines: %.3f of bare; verifier scaling 1 -> %d partitions: %.2fx\n", n, n, mc, n, sc)
	b.ReportMetric(pc, "per-core-ratio")
	b.ReportMetric(pcc, "per-core-cpu-ratio")
	b.ReportMetric(mc, "n-core-ratio")
	b.ReportMetric(sc, "scaling-x")
}

// sigStructure splits a canonical envelope into its key, the bytes its
// signature covers (RFC 9052 Sig_structure) and the signature, as a bare
// verifier would be handed them.
func sigStructure(t testing.TB, env []byte) (ed25519.PublicKey, []byte, []byte) {
	t.Helper()
	kid := kidOf(env)
	if kid == nil {
		t.Fatal("not a canonical envelope")
	}
	const protected = 2 + 8 + 32 // d2 84, the protected bstr head, the kid
	payloadCB := env[protected+1 : len(env)-2-ed25519.SignatureSize]
	tbs := append([]byte("\x84\x6aSignature1"), env[2:protected]...)
	tbs = append(tbs, 0x40)
	tbs = append(tbs, payloadCB...)
	return ed25519.PublicKey(kid), tbs, env[len(env)-ed25519.SignatureSize:]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// threadCPU is the CPU time of the calling thread (Linux RUSAGE_THREAD),
// 0 where that is not available.
func threadCPU() time.Duration {
	const rusageThread = 1
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package steward

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"meshd/steward/internal/framelog"
	"meshd/wire"
)

// Every benchmark here measures its own baseline in the same run, at the
// same parallelism, interleaved with the measured work, and reports the
// median ratio of several repetitions, so the figures survive a noisy
// machine.

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// BenchmarkSealVsSign: a full Seal through the log (build, encode, sign,
// chain, frame, write; no fsync) against a bare ed25519.Sign of the same
// core, both on one goroutine. Target: ratio <= 1.6.
func BenchmarkSealVsSign(b *testing.B) {
	k := testKey(b)
	_, l, _ := openTestLog(b, filepath.Join(b.TempDir(), "r"), k, LogOptions{NoSync: true, CheckpointEvery: -1})
	defer l.Close()
	st := New(k, l, Options{Clock: testClock})
	d := draft(1)
	r, _ := st.Build(d, 1, &wire.ContentID{1}, make([]byte, NonceSize), testClock())
	core, _ := r.EncodeCore()
	const per = 200
	var ratios []float64
	var bareNs, sealNs float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j := 0; j < per; j++ {
			ed25519.Sign(k.priv, core)
		}
		mid := time.Now()
		for j := 0; j < per; j++ {
			if _, err := st.Seal(context.Background(), d); err != nil {
				b.Fatal(err)
			}
		}
		end := time.Now()
		bare, seal := mid.Sub(start), end.Sub(mid)
		ratios = append(ratios, float64(seal)/float64(bare))
		bareNs += float64(bare.Nanoseconds()) / per
		sealNs += float64(seal.Nanoseconds()) / per
	}
	b.ReportMetric(bareNs/float64(b.N), "sign-ns/op")
	b.ReportMetric(sealNs/float64(b.N), "seal-ns/op")
	b.ReportMetric(median(ratios), "seal/sign")
}

// verifyFixture is a log of n receipts and the same cores and signatures
// for the bare baseline.
type verifyFixture struct {
	dir   string
	pub   ed25519.PublicKey
	msgs  [][]byte // the exact Sig_structures the envelopes sign
	sigs  [][]byte
	count uint64
}

func newVerifyFixture(b *testing.B, n int) *verifyFixture {
	k := testKey(b)
	dir := filepath.Join(b.TempDir(), "r")
	st, l, _ := openTestLog(b, dir, k, LogOptions{NoSync: true, CheckpointEvery: -1})
	fx := &verifyFixture{dir: dir, pub: k.Public(), count: uint64(n)}
	for i := 0; i < n; i++ {
		s, err := st.Seal(context.Background(), draft(i))
		if err != nil {
			b.Fatal(err)
		}
		core, _ := s.Receipt.EncodeCore()
		msg := sigStructure(k, core)
		fx.msgs = append(fx.msgs, msg)
		fx.sigs = append(fx.sigs, ed25519.Sign(k.priv, msg))
	}
	l.Close()
	return fx
}

// sigStructure is the COSE Sig_structure a receipt signature covers.
func sigStructure(k *Key, payload []byte) []byte {
	m := []byte{0x84, 0x6a}
	m = append(m, "Signature1"...)
	m = append(m, 0x58, byte(len(k.rawProt)))
	m = append(m, k.rawProt...)
	m = append(m, 0x40)
	switch n := len(payload); {
	case n < 24:
		m = append(m, 0x40|byte(n))
	case n < 256:
		m = append(m, 0x58, byte(n))
	default:
		m = append(m, 0x59, byte(n>>8), byte(n))
	}
	return append(m, payload...)
}

// bareVerify verifies every signature of fx with workers goroutines.
func (fx *verifyFixture) bareVerify(b *testing.B, workers int) {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for j := w; j < len(fx.msgs); j += workers {
				if !ed25519.Verify(fx.pub, fx.msgs[j], fx.sigs[j]) {
					b.Error("bare verify failed")
				}
			}
		}(w)
	}
	wg.Wait()
}

// BenchmarkVerifyChain: verifying a whole log (read, frame checks, strict
// decoding, signatures, chain links) against bare ed25519.Verify over the
// same messages — one goroutine against one, and all cores against all
// cores. Target: both ratios >= 0.85.
func BenchmarkVerifyChain(b *testing.B) {
	fx := newVerifyFixture(b, 2000)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		var ratios []float64
		for i := 0; i < b.N; i++ {
			start := time.Now()
			fx.bareVerify(b, workers)
			mid := time.Now()
			rep, err := VerifyLog(context.Background(), fx.dir, VerifyOptions{Trusted: fx.pub, Workers: workers})
			if err != nil || rep.Records != fx.count {
				b.Fatal(err)
			}
			ratios = append(ratios, float64(mid.Sub(start))/float64(time.Since(mid)))
		}
		name := "chain/bare-1"
		if workers > 1 {
			name = "chain/bare-all"
		}
		b.ReportMetric(median(ratios), name)
	}
}

// BenchmarkOpenCheckpointVsGenesis: opening a 1M-receipt log from its
// checkpoint against verifying it from genesis. Target: >= 100x faster.
// The log is made without signing a million receipts: one signed receipt
// per sequence is too slow to build in a benchmark, so it is built once
// with real seals at the cost of its size.
func BenchmarkOpenCheckpointVsGenesis(b *testing.B) {
	const n = 1_000_000
	k := testKey(b)
	dir := filepath.Join(b.TempDir(), "r")
	st, l, _ := openTestLog(b, dir, k, LogOptions{NoSync: true, CheckpointEvery: -1})
	for i := 0; i < n; i++ {
		if _, err := st.Seal(context.Background(), draft(i)); err != nil {
			b.Fatal(err)
		}
	}
	l.Close()
	var ratios []float64
	var ckNs, fullNs float64
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, rep, err := OpenLog(context.Background(), dir, LogOptions{Key: k, NoSync: true})
		if err != nil || rep.Records != n || rep.Verified != 0 {
			b.Fatalf("open from checkpoint: %v %+v", err, rep)
		}
		ck := time.Since(start)
		l.Close()
		start = time.Now()
		l, rep, err = OpenLog(context.Background(), dir, LogOptions{Key: k, NoSync: true, Full: true})
		if err != nil || rep.Verified != n {
			b.Fatalf("open from genesis: %v", err)
		}
		full := time.Since(start)
		l.Close()
		ratios = append(ratios, float64(full)/float64(ck))
		ckNs += float64(ck.Nanoseconds())
		fullNs += float64(full.Nanoseconds())
	}
	b.ReportMetric(ckNs/float64(b.N)/1e6, "checkpoint-open-ms")
	b.ReportMetric(fullNs/float64(b.N)/1e6, "genesis-open-ms")
	b.ReportMetric(median(ratios), "genesis/checkpoint")
}

// BenchmarkDurableAppends: 64 concurrent durable sealers against one, on a
// real file with fsync, beside the disk's own fsync rate measured in the
// same run. The chain makes signing serial, so the 64-sealer rate is capped
// near 1/(seal time); receipts/fsync shows group commit at work whatever
// the disk.
func BenchmarkDurableAppends(b *testing.B) {
	k := testKey(b)
	var appends, syncs uint64
	run := func(sealers, each int) (time.Duration, uint64) {
		dir := filepath.Join(b.TempDir(), "r")
		st, l, _ := openTestLog(b, dir, k, LogOptions{CheckpointEvery: -1})
		start := time.Now()
		var wg sync.WaitGroup
		for g := 0; g < sealers; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					if _, err := st.Seal(context.Background(), draft(g*each+i)); err != nil {
						b.Error(err)
						return
					}
				}
			}(g)
		}
		wg.Wait()
		el := time.Since(start)
		if sealers > 1 {
			appends += uint64(sealers * each)
			syncs += l.Syncs()
		}
		l.Close()
		rep, err := VerifyLog(context.Background(), dir, VerifyOptions{Trusted: k.Public()})
		if err != nil || rep.Records != uint64(sealers*each) {
			b.Fatalf("lost or duplicated sequence: %v %+v", err, rep)
		}
		return el, rep.Records
	}
	fsyncRate := func(n int) float64 {
		f, err := framelog.OpenFile(filepath.Join(b.TempDir(), "fsync"), true)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 600)
		start := time.Now()
		for i := 0; i < n; i++ {
			f.Write(buf)
			f.Sync()
		}
		return float64(n) / time.Since(start).Seconds()
	}
	var ratios, disk []float64
	var sr, gr float64
	for i := 0; i < b.N; i++ {
		t1, n1 := run(1, 128)
		t64, n64 := run(64, 16)
		disk = append(disk, fsyncRate(128))
		s, g := float64(n1)/t1.Seconds(), float64(n64)/t64.Seconds()
		sr, gr = sr+s, gr+g
		ratios = append(ratios, g/s)
	}
	b.ReportMetric(sr/float64(b.N), "single-receipts/s")
	b.ReportMetric(gr/float64(b.N), "64-sealers-receipts/s")
	b.ReportMetric(median(ratios), "64/single")
	b.ReportMetric(median(disk), "disk-fsyncs/s")
	b.ReportMetric(float64(appends)/float64(syncs), "64-sealers-receipts/fsync")
}

// BenchmarkRecordVsServeSeal: sealing an idle record, a run-open and a
// run-close (128 serves listed), each with its document built and hashed,
// against sealing a serve receipt, all into one log, interleaved in a
// rotating order; the ratio is the median over repetitions. Target:
// every record/serve ratio <= 1 (a record costs no more than one seal).
func BenchmarkRecordVsServeSeal(b *testing.B) {
	k := testKey(b)
	_, l, _ := openTestLog(b, filepath.Join(b.TempDir(), "r"), k, LogOptions{NoSync: true, CheckpointEvery: -1})
	defer l.Close()
	st := New(k, l, Options{Clock: testClock})
	ctx := context.Background()
	serve := hwDraft(1)
	run := uint64(0)
	serves := make([]uint64, 128)
	for i := range serves {
		serves[i] = uint64(i + 1)
	}
	od := RunOpenDoc{WorkloadSHA256: "abababababababababababababababababababababababababababababababab", Repetitions: 16, ServesDeclared: 128, Harness: "meshctl v1",
		Caller: "lab", Board: `{"arch":"arm64","cores":4,"cpu_model":"Cortex-A78AE","kernel":"5.15","memory_bytes":8000000000}`,
		Version: "v0.1 0123456789abcdef", Meters: `[{"declared_accuracy_ppm":3000,"driver":"ina226","kind":"adc","name":"vdd"}]`}
	kinds := []struct {
		name string
		seal func() error
	}{
		{"serve", func() error { _, err := st.Seal(ctx, serve); return err }},
		{"idle", func() error {
			doc := IdleDoc{Backend: "ref-mid", DurationMs: 2000, Run: &run}.Encode()
			_, err := st.Seal(ctx, RecordDraft(RecordIdle, doc, &run, "ref-mid", IdleRecipe, "idle: 2000 ms on ina226@i2c-1:0x40", wire.Measured(5000, 0), hwMetering()))
			return err
		}},
		{"run-open", func() error {
			_, err := st.Seal(ctx, RunRecordDraft(RecordRunOpen, od.Encode(), nil, RunRoute(RecordRunOpen, &od, nil)))
			return err
		}},
		{"run-close", func() error {
			cd := RunCloseDoc{Run: run, ServesDeclared: 128, ServesSealed: 128, Serves: serves, Idle: []uint64{129, 130}, Status: RunComplete}
			_, err := st.Seal(ctx, RunRecordDraft(RecordRunClose, cd.Encode(), &run, RunRoute(RecordRunClose, nil, &cd)))
			return err
		}},
	}
	const per = 100
	ratios := make([][]float64, len(kinds))
	ns := make([]float64, len(kinds))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var took [4]time.Duration
		// Rotate the order, so no kind always runs first (or last) in a
		// repetition.
		for o := range kinds {
			j := (o + i) % len(kinds)
			kd := kinds[j]
			start := time.Now()
			for r := 0; r < per; r++ {
				if err := kd.seal(); err != nil {
					b.Fatal(err)
				}
			}
			took[j] = time.Since(start)
			ns[j] += float64(took[j].Nanoseconds()) / per
		}
		for j := range kinds {
			ratios[j] = append(ratios[j], float64(took[j])/float64(took[0]))
		}
	}
	b.StopTimer()
	b.Logf("%-10s %12s %14s", "sealed", "ns/seal", "x serve (median)")
	for j, kd := range kinds {
		b.Logf("%-10s %12.0f %14.3f", kd.name, ns[j]/float64(b.N), median(ratios[j]))
		if j > 0 {
			b.ReportMetric(median(ratios[j]), kd.name+"/serve")
		}
	}
	b.ReportMetric(ns[0]/float64(b.N), "serve-ns/seal")
}

// BenchmarkPreallocatedSeal: one durable sealer into a log whose segment is
// preallocated (the default) against one into a log that appends to a
// growing file (Preallocate < 0), in batches interleaved between the two
// logs, on the same disk. The ratio is the median over batches of the
// preallocated seal's time over the growing one's: what an fsync that
// need not grow the file saves per receipt. Target: ratio < 1.
func BenchmarkPreallocatedSeal(b *testing.B) {
	k := testKey(b)
	open := func(name string, prealloc int64) *Steward {
		st, l, _ := openTestLog(b, filepath.Join(b.TempDir(), name), k, LogOptions{CheckpointEvery: -1, Preallocate: prealloc})
		b.Cleanup(func() { l.Close() })
		return st
	}
	pre, grow := open("pre", 0), open("grow", -1)
	seq := 0
	batch := func(st *Steward, n int) time.Duration {
		start := time.Now()
		for range n {
			if _, err := st.Seal(context.Background(), draft(seq)); err != nil {
				b.Fatal(err)
			}
			seq++
		}
		return time.Since(start)
	}
	batch(pre, 16) // the first chunk's zeros, and both files' first blocks
	batch(grow, 16)
	const per = 64
	var ratios, preUs, growUs []float64
	b.ResetTimer()
	for i := range b.N {
		var tp, tg time.Duration
		if i%2 == 0 {
			tp, tg = batch(pre, per), batch(grow, per)
		} else {
			tg, tp = batch(grow, per), batch(pre, per)
		}
		ratios = append(ratios, float64(tp)/float64(tg))
		preUs = append(preUs, float64(tp.Microseconds())/per)
		growUs = append(growUs, float64(tg.Microseconds())/per)
	}
	b.ReportMetric(median(preUs), "preallocated-µs/seal")
	b.ReportMetric(median(growUs), "growing-µs/seal")
	b.ReportMetric(median(ratios), "preallocated/growing")
}

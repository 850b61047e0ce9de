package steward

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"meshd/wire"
)

// Every benchmark here measures its own baseline in the same run and
// reports the ratio, so the figures survive a noisy machine.

// BenchmarkSealVsSign: encode + sign + chain (no fsync) against a bare
// ed25519.Sign over the same core bytes. Target: ratio <= 1.5.
func BenchmarkSealVsSign(b *testing.B) {
	k := testKey(b)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	d := draft(1)
	now := testClock()
	r, _ := st.Build(d, 1, &wire.ContentID{1}, nonce, now)
	core, _ := r.EncodeCore()

	// Interleave baseline and measured work so that load from elsewhere on
	// the machine hits both alike.
	prev := wire.ContentID{1}
	var bare, seal time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		ed25519.Sign(k.priv, core)
		mid := time.Now()
		r, err := st.Build(d, uint64(i+1), &prev, nonce, now)
		if err != nil {
			b.Fatal(err)
		}
		c, err := r.EncodeCore()
		if err != nil {
			b.Fatal(err)
		}
		env, err := SealCore(k, c)
		if err != nil {
			b.Fatal(err)
		}
		prev = wire.ContentOf(env)
		seal += time.Since(mid)
		bare += mid.Sub(start)
	}
	b.ReportMetric(float64(bare.Nanoseconds())/float64(b.N), "sign-ns/op")
	b.ReportMetric(float64(seal.Nanoseconds())/float64(b.N), "seal-ns/op")
	b.ReportMetric(float64(seal)/float64(bare), "seal/sign")
}

// BenchmarkVerifyLogVsVerify: receipts per second verified from a log file
// against bare ed25519.Verify calls per second. Target: ratio >= 0.8.
func BenchmarkVerifyLogVsVerify(b *testing.B) {
	const n = 2000
	k := testKey(b)
	path := filepath.Join(b.TempDir(), "r.log")
	l, _, err := OpenLog(path, LogOptions{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	st := New(k, l, Options{})
	var cores, sigs [][]byte
	for i := 0; i < n; i++ {
		s, err := st.Seal(context.Background(), draft(i))
		if err != nil {
			b.Fatal(err)
		}
		c, _ := s.Receipt.EncodeCore()
		cores = append(cores, c)
		sigs = append(sigs, ed25519.Sign(k.priv, c))
	}
	l.Close()
	data, _ := os.ReadFile(path)

	var bare, scan time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		for j := range cores {
			if !ed25519.Verify(k.pub, cores[j], sigs[j]) {
				b.Fatal("bare verify failed")
			}
		}
		bare += time.Since(start)
		start = time.Now()
		rep, err := Scan(bytes.NewReader(data), k.Public(), nil)
		if err != nil || rep.Records != n {
			b.Fatal(err)
		}
		scan += time.Since(start)
	}
	b.ReportMetric(float64(n*b.N)/bare.Seconds(), "bare-verify/s")
	b.ReportMetric(float64(n*b.N)/scan.Seconds(), "log-receipts/s")
	b.ReportMetric(bare.Seconds()/scan.Seconds(), "log/bare-rate")
}

// BenchmarkDurableAppends: durable receipts per second with 32 concurrent
// sealers against one sealer, on a real file with fsync. Target: >= 10x.
// The chain makes signing serial, so the 32-sealer rate is capped near
// 1/(seal time) and the ratio near (seal + fsync) / seal: it reaches the
// target only where an fsync costs well over ten seals. appends/fsync shows
// group commit at work whatever the disk.
func BenchmarkDurableAppends(b *testing.B) {
	k := testKey(b)
	var appends, syncs uint64
	run := func(sealers, each int) (time.Duration, uint64) {
		path := filepath.Join(b.TempDir(), "r.log")
		l, _, err := OpenLog(path, LogOptions{})
		if err != nil {
			b.Fatal(err)
		}
		st := New(k, l, Options{})
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
		rep, err := VerifyLogFile(path, k.Public(), nil)
		if err != nil || rep.Records != uint64(sealers*each) {
			b.Fatalf("lost or duplicated sequence: %v %+v", err, rep)
		}
		return el, rep.Records
	}
	var single, group time.Duration
	var ns, ng uint64
	for i := 0; i < b.N; i++ {
		t1, n1 := run(1, 128)
		t32, n32 := run(32, 32)
		single += t1
		group += t32
		ns += n1
		ng += n32
	}
	sr := float64(ns) / single.Seconds()
	gr := float64(ng) / group.Seconds()
	b.ReportMetric(sr, "single-receipts/s")
	b.ReportMetric(gr, "32-sealers-receipts/s")
	b.ReportMetric(gr/sr, "group/single")
	b.ReportMetric(float64(appends)/float64(syncs), "32-sealers-appends/fsync")
}

package grant_test

import (
	"crypto/ed25519"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"meshd/steward/grant"
	"meshd/steward/ledger"
	"meshd/wire"
)

// BenchmarkAuthorise compares authorising a serve (verify + ledger hold,
// with the ledger's fsync switched off) against one bare ed25519.Verify of
// a message the size of a grant's signed structure, all in the same run:
//
//	verify-ns     one ed25519.Verify
//	first-ns      Authorise on a grant never seen before (full verification)
//	cached-ns     Authorise on a grant already verified (interval, resource
//	              and budget still checked, hold still taken)
//	first/verify, cached/verify   the ratios
//
// ns/op is the sum of the three phases and means nothing on its own.
func BenchmarkAuthorise(b *testing.B) {
	issuer := key(b, 1)
	led, _, err := ledger.Open(filepath.Join(b.TempDir(), "ledger"), nil, ledger.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer led.Close()
	auth, err := grant.NewAuthoriser(grant.Config{
		Steward: stewardKey().Public(), Trusted: []ed25519.PublicKey{issuer.Public()}, Ledger: led,
		Clock: func() time.Time { return t0 },
	})
	if err != nil {
		b.Fatal(err)
	}
	g := base()
	g.AnyRequest = true
	g.BudgetUJ = 1 << 62

	b.StopTimer()
	fresh := make([][]byte, b.N)
	for i := range fresh {
		fresh[i] = issue(b, issuer, g).Envelope
	}
	repeat := issue(b, issuer, g).Envelope
	msg := make([]byte, 300)
	sig := ed25519.Sign(ed25519.NewKeyFromSeed(make([]byte, 32)), msg)
	pub := ed25519.NewKeyFromSeed(make([]byte, 32)).Public().(ed25519.PublicKey)
	req := requestID(1)
	if _, err := auth.Authorise(ctx, repeat, req, 1); err != nil { // now cached
		b.Fatal(err)
	}
	b.StartTimer()

	// The phases run interleaved in small blocks so that load from other
	// processes falls on all three alike.
	const block = 32
	var verify, first, cached time.Duration
	for lo := 0; lo < b.N; lo += block {
		hi := min(lo+block, b.N)
		start := time.Now()
		for i := lo; i < hi; i++ {
			if !ed25519.Verify(pub, msg, sig) {
				b.Fatal("verify failed")
			}
		}
		verify += time.Since(start)

		start = time.Now()
		for i := lo; i < hi; i++ {
			if _, err := auth.Authorise(ctx, fresh[i], req, 1); err != nil {
				b.Fatal(err)
			}
		}
		first += time.Since(start)

		start = time.Now()
		for i := lo; i < hi; i++ {
			if _, err := auth.Authorise(ctx, repeat, req, 1); err != nil {
				b.Fatal(err)
			}
		}
		cached += time.Since(start)
	}

	n := float64(b.N)
	b.ReportMetric(float64(verify.Nanoseconds())/n, "verify-ns")
	b.ReportMetric(float64(first.Nanoseconds())/n, "first-ns")
	b.ReportMetric(float64(cached.Nanoseconds())/n, "cached-ns")
	b.ReportMetric(float64(first)/float64(verify), "first/verify")
	b.ReportMetric(float64(cached)/float64(verify), "cached/verify")
}

// BenchmarkServeRate runs 32 concurrent serves through the real agent
// (reference engine, receipt log and ledger with fsync on) with and
// without a grant, in the same run, and reports granted/ungranted: the cost
// of phase 1 and the ledger's group-committed hold on the serve rate.
func BenchmarkServeRate(b *testing.B) {
	issuer := key(b, 1)
	g := base()
	g.AnyRequest, g.BudgetUJ = true, 1<<62
	env := issue(b, issuer, g).Envelope
	s, err := openStack(b.TempDir(), stackOptions{trusted: []ed25519.PublicKey{issuer.Public()}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.close()
	req, prompt := request("bench", wire.F1)
	phase := func(grantEnv []byte) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		next := make(chan struct{}, b.N)
		for i := 0; i < b.N; i++ {
			next <- struct{}{}
		}
		close(next)
		for w := 0; w < 32; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range next {
					if _, err := s.agent.ServeGranted(ctx, req, prompt, grantEnv); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	plain := phase(nil)
	granted := phase(env)
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N), "ungranted-ns/serve")
	b.ReportMetric(float64(granted.Nanoseconds())/float64(b.N), "granted-ns/serve")
	b.ReportMetric(float64(granted)/float64(plain), "granted/ungranted")
}

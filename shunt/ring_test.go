package shunt

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBridgeEnergyAndBound(t *testing.T) {
	for _, tc := range []struct {
		name       string
		t0, t1     int64
		wantE      float64 // µJ
		wantInterp float64 // µJ
	}{
		// 0 W at 0 ms to 10 W at 10 ms, no sensor error: a monotone load
		// lies within |Δp|·g/2 of the chord over the whole gap...
		{"whole gap", 0, 10e6, 50_000, 50_000},
		// ...and within |Δp| times the part taken of it.
		{"middle of the gap", 2.5e6, 7.5e6, 25_000, 50_000},
		{"start of the gap", 0, 2e6, 2_000, 20_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRing(blockSize, 0)
			r.addValid(0, 0, 0, 0)
			r.addValid(10e6, 0, 10e6, 0)
			res, err := r.query(tc.t0, tc.t1)
			if err != nil {
				t.Fatal(err)
			}
			if e := res.ePJ / 1e6; math.Abs(e-tc.wantE) > 1e-6 {
				t.Errorf("energy %f µJ, want %f", e, tc.wantE)
			}
			if b := res.bPJ / 1e6; b < tc.wantInterp || b > tc.wantInterp+1e-3 {
				t.Errorf("bound %f µJ, want %f", b, tc.wantInterp)
			}
			if res.samples != 2 || !res.startOK || !res.endOK || res.maxGap != 10e6 {
				t.Errorf("coverage %+v", res)
			}
		})
	}
}

func TestSpansStretchClipAndBridge(t *testing.T) {
	r := newRing(blockSize, 0)
	r.addValid(1e6, 1e6, 1e6, 0)   // [0, 1] ms at 1 W
	r.addValid(2.1e6, 1e6, 2e6, 0) // slow chip: stretched to [1, 2.1]
	r.addValid(3e6, 1e6, 3e6, 0)   // fast chip: clipped to [2.1, 3]
	r.addValid(5e6, 1e6, 5e6, 0)   // skipped conversion: bridge [3, 4], span [4, 5]
	res, err := r.query(0, 5e6)
	if err != nil {
		t.Fatal(err)
	}
	// 1 + 2·1.1 + 3·0.9 + (3+5)/2·1 + 5·1 mJ
	if got, want := res.ePJ/1e6, 1000+2200+2700+4000+5000.0; math.Abs(got-want) > 1e-6 {
		t.Errorf("energy %f µJ, want %f", got, want)
	}
	if got, want := res.bPJ/1e6, 1000.0; got < want || got > want+1e-3 {
		t.Errorf("bound %f µJ, want the bridge's |Δp|·g/2 = %f", got, want)
	}
	if res.maxGap != 2e6 {
		t.Errorf("max gap %d ns, want 2 ms", res.maxGap)
	}
}

// TestRingSearchesMatchBruteForce checks the binary searches, counts and
// block maxima against a linear scan, across wrap-around.
func TestRingSearchesMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	r := newRing(3*blockSize, 0.001)
	type rec struct {
		valid bool
		gap   int64
	}
	var all []rec
	var end int64
	for range 11 * blockSize {
		if rng.IntN(10) == 0 {
			r.addInvalid(kindReadError)
			all = append(all, rec{})
			continue
		}
		end += 1e6 + rng.Int64N(3e6)
		r.addValid(end, 1e6, rng.Int64N(1e7), 100)
		all = append(all, rec{valid: true, gap: r.at(r.next - 1).gap})
	}
	lo := r.lo()
	if lo != int64(len(all))-r.capacity() {
		t.Fatalf("lo %d", lo)
	}
	for range 2000 {
		a := lo + rng.Int64N(r.next-lo)
		b := a + rng.Int64N(r.next-a)
		var valid, mx int64
		for s := a; s <= b; s++ {
			if all[s].valid {
				valid++
			}
			mx = max(mx, all[s].gap)
		}
		if got := r.validCount(a, b); got != valid {
			t.Fatalf("validCount(%d, %d) = %d, want %d", a, b, got, valid)
		}
		if got := r.maxGap(a, b); got != mx {
			t.Fatalf("maxGap(%d, %d) = %d, want %d", a, b, got, mx)
		}
		fv, lv := int64(-1), int64(-1)
		for s := a; s < r.next; s++ {
			if all[s].valid {
				fv = s
				break
			}
		}
		for s := b; s >= lo; s-- {
			if all[s].valid {
				lv = s
				break
			}
		}
		if got := r.firstValid(a); got != fv {
			t.Fatalf("firstValid(%d) = %d, want %d", a, got, fv)
		}
		if got := r.lastValid(b); got != lv {
			t.Fatalf("lastValid(%d) = %d, want %d", b, got, lv)
		}
	}
}

func TestNonMonotonicTimestampIsInvalid(t *testing.T) {
	r := newRing(blockSize, 0)
	r.addValid(5e6, 1e6, 1e6, 0)
	r.addValid(5e6, 1e6, 9e9, 0) // same conversion again
	r.addValid(4e6, 1e6, 9e9, 0) // from the past
	r.addValid(6e6, 1e6, 1e6, 0)
	if r.bad != 2 {
		t.Fatalf("%d invalid entries, want 2", r.bad)
	}
	res, err := r.query(4e6, 6e6)
	if err != nil {
		t.Fatal(err)
	}
	if res.ePJ != 2e9 || res.invalid != 2 {
		t.Errorf("energy %f pJ with %d invalid, want 2 mJ with 2", res.ePJ, res.invalid)
	}
}

//go:build !purego

package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestNEONDotsAxpys runs dots and axpys (NEON) against dotsGeneric and
// axpysGeneric bit for bit (the same fused chains; see attend_arm64.s),
// over head sizes around the 4- and 16-value chunks, key and row counts
// around the four-key groups and padded strides, with zeros of both
// signs among the values.
func TestNEONDotsAxpys(t *testing.T) {
	r := rand.New(rand.NewPCG(61, 62))
	negZero := float32(0)
	negZero = -negZero
	for _, hd := range []int{1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 20, 31, 64, 100, 128} {
		for _, pad := range []int{0, 3, 64} {
			for n := 1; n <= 13; n++ {
				stride := hd + pad
				q := randVec(r, hd, 1)
				kv := randVec(r, (n-1)*stride+hd, 2)
				kv[0], q[hd-1] = 0, negZero
				got := make([]float32, n+1)
				got[n] = 42
				want := make([]float32, n)
				dots(q, kv, stride, got[:n])
				dotsGeneric(q, kv, stride, want)
				if got[n] != 42 {
					t.Fatalf("dots hd=%d n=%d: wrote past the output", hd, n)
				}
				for i := range want {
					if !sameFloat(got[i], want[i]) {
						t.Fatalf("dots hd=%d pad=%d n=%d key %d: NEON %v, generic %v", hd, pad, n, i, got[i], want[i])
					}
				}

				p := randVec(r, n, 1)
				p[n/2] = negZero
				out0 := randVec(r, hd+1, 1)
				out0[0] = negZero
				gotA := append([]float32(nil), out0...)
				wantA := append([]float32(nil), out0...)
				axpys(gotA[:hd], p, kv, stride)
				axpysGeneric(wantA[:hd], p, kv, stride)
				for i := range wantA {
					if !sameFloat(gotA[i], wantA[i]) {
						t.Fatalf("axpys hd=%d pad=%d n=%d value %d: NEON %v, generic %v", hd, pad, n, i, gotA[i], wantA[i])
					}
				}
			}
		}
	}
}

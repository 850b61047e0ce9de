package kernels

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// TestStreamSum: every probe's sum equals a plain word sum for lengths
// around its 256-byte passes, a tail that is not a whole word ignored.
func TestStreamSum(t *testing.T) {
	r := rand.New(rand.NewPCG(91, 92))
	b := make([]byte, 70000)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 7, 8, 255, 256, 257, 511, 512, 4096 + 24, 69999, 70000} {
		var want uint64
		for i := 0; i+8 <= n; i += 8 {
			want += binary.LittleEndian.Uint64(b[i:])
		}
		if got := StreamSum(b[:n]); got != want {
			t.Fatalf("%d bytes: StreamSum %#x, want %#x", n, got, want)
		}
		for _, p := range StreamProbes() {
			if got := p.Sum(b[:n]); got != want {
				t.Fatalf("%d bytes: probe %s: %#x, want %#x", n, p.Name, got, want)
			}
		}
	}
}

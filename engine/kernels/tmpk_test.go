package kernels

import (
	"math/rand/v2"
	"testing"
)

func BenchmarkTmpMem(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	rows, nb := 100000, 18
	rb := nb * 34
	w := randQ8Rows(r, rows, nb, rb)
	dst := make([]byte, len(w))
	v := randQVec(r, nb)
	out := make([]float32, rows)
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		for b.Loop() {
			copy(dst, w)
		}
	})
	b.Run("asm-1row0", func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		for b.Loop() {
			for i := 0; i < rows; i++ {
				dotQ8_0Rows(w[i*rb:], rb, nb, v, out[i:i+1])
			}
		}
	})
	b.Run("asm", func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		for b.Loop() {
			dotQ8_0Rows(w, rb, nb, v, out)
		}
	})
	b.Run("asm-1row", func(b *testing.B) {
		b.SetBytes(int64(len(w)))
		for b.Loop() {
			for i := 0; i < rows; i++ {
				dotQ8_0Rows(w[i*rb:], rb, nb, v, out[i:i+1])
			}
		}
	})
}

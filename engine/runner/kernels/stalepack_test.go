package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// TestMatMulIgnoresEarlierPacks runs products of every batch size after
// products of every other size over the same matrix, so that each takes
// the pooled token pack an earlier one left: a pack a packer does not
// fill in every part must still lead its kernels only to its own data.
// Each batch must give MatVec's bits token by token. (A five-token Q5_K
// batch once ran the sixteen-row kernel on the q32 part an eight-token
// batch had left in the pack.)
func TestMatMulIgnoresEarlierPacks(t *testing.T) { eachWidth(t, testMatMulIgnoresEarlierPacks) }

func testMatMulIgnoresEarlierPacks(t *testing.T) {
	r := rand.New(rand.NewPCG(91, 92))
	defer func() { matMulKernels = true }()
	matMulKernels = true
	p := NewPool(1)
	defer p.Close()
	sizes := []int{2, 3, 4, 5, 6, 7, 8, 9, 12, 16}
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		const rows, cols = 96, 2 * qkK
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.05))
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			t.Fatal(err)
		}
		run := func(T int) {
			t.Helper()
			x := randVec(r, T*cols, 1)
			qx := make([]*QVec, T)
			for tok := range qx {
				qx[tok] = m.NewActivation()
				qx[tok].Quantize(x[tok*cols : (tok+1)*cols])
			}
			got := make([]float32, T*rows)
			MatMul(p, m, got, x, T, qx)
			want := make([]float32, rows)
			for tok := range T {
				MatVec(p, m, want, x[tok*cols:(tok+1)*cols], qx[tok])
				for i, w := range want {
					if g := got[tok*rows+i]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%s: %d tokens: token %d row %d is %v, MatVec's %v", typ, T, tok, i, g, w)
					}
				}
			}
		}
		for _, before := range sizes {
			for _, T := range sizes {
				run(before)
				run(T)
			}
		}
	}
}

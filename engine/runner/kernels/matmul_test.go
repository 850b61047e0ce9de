package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

// TestMatMulKernels: MatMul with the multi-token kernels gives, for
// every type, every batch of 1 to 9 tokens (full groups of four, padded
// groups of two or three, a last single token) and batches of 16 and 19
// (groups of eight, then four and the rest), row counts that leave
// partial tiles and an odd row, and pools of one and two workers, the
// per-token MatVec results, and the same results as MatMul with the
// multi-token kernels turned off (the portable path). Where the CPU has
// the AVX-512 kernels it runs with them and again with the AVX2 ones.
func TestMatMulKernels(t *testing.T) { eachWidth(t, testMatMulKernels) }

func testMatMulKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	const cols = 512
	defer func() { matMulKernels = true }()
	for _, typ := range allTypes {
		for _, rows := range []int{1, 2, 7, 37} {
			enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.05))
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMatrix(typ, rows, cols, enc)
			if err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19} {
				x := randVec(r, T*cols, 1)
				var qx []*QVec
				if m.Quantized() {
					for tok := 0; tok < T; tok++ {
						q := m.NewActivation()
						q.Quantize(x[tok*cols : (tok+1)*cols])
						qx = append(qx, q)
					}
				}
				if hasAVX2 && T >= 2 && rows >= 2 && (typ == gguf.Q8_0 || typ == gguf.Q4_0 || typ == gguf.Q4_K || hasPk4Kernel(typ, T, cols)) {
					tp := m.packTokens(T, qx)
					k := m.mulTokens(0, rows, make([]float32, T*rows), T, qx, tp)
					tp.release()
					if k != T&^1 && k != T {
						t.Fatalf("%s rows=%d T=%d: multi-token kernel took %d tokens", typ, rows, T, k)
					}
				}
				for _, workers := range []int{1, 2} {
					p := NewPool(workers)
					got := make([]float32, T*rows+1)
					got[T*rows] = 42
					matMulKernels = true
					MatMul(p, m, got[:T*rows], x, T, qx)
					if got[T*rows] != 42 {
						t.Fatalf("%s: wrote past the output", typ)
					}
					plain := make([]float32, T*rows)
					matMulKernels = false
					MatMul(p, m, plain, x, T, qx)
					matMulKernels = true
					want := make([]float32, rows)
					for tok := 0; tok < T; tok++ {
						var q *QVec
						if qx != nil {
							q = qx[tok]
						}
						MatVec(p, m, want, x[tok*cols:(tok+1)*cols], q)
						for i, w := range want {
							g := got[tok*rows+i]
							if d := math.Abs(float64(g - w)); d > 1e-5*(1+math.Abs(float64(w))) {
								t.Fatalf("%s rows=%d T=%d workers=%d token %d row %d: MatMul %v, MatVec %v", typ, rows, T, workers, tok, i, g, w)
							}
							if g != plain[tok*rows+i] {
								t.Fatalf("%s rows=%d T=%d workers=%d token %d row %d: multi-token kernel %v, portable path %v", typ, rows, T, workers, tok, i, g, plain[tok*rows+i])
							}
						}
					}
					p.Close()
				}
			}
		}
	}
}

// TestMatMulTokenGroups: for the types with multi-token kernels that
// take every token of a tile (sixteen rows against groups of three
// tokens; with AVX2 alone two rows against groups of four, an odd last
// row through the row kernels) or nearly every one (Q5_K and Q6_K: one row against groups of
// eight, a last short group padded or left to the row kernels), MatMul equals the per-token MatVec bit for bit for every
// batch of 1 to 17 tokens and a few larger ones, row counts around the
// sixteen-row tile (one, an odd few, a full tile, a tile and one, several
// tiles and a part), one to nine blocks per row (one to three
// super-blocks), and one and two workers; the kernel must take every
// token it is given (Q5_K, Q6_K: every group's). Besides
// encoded weights, random block bytes with outlying activations reach
// the extremes of the integer sums (Q8_0's −128 weights included).
func TestMatMulTokenGroups(t *testing.T) { eachWidth(t, testMatMulTokenGroups) }

func testMatMulTokenGroups(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 56))
	defer func() { matMulKernels = true }()
	matMulKernels = true
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		bk, nbs := 32, 9
		kq := typ == gguf.Q5_K || typ == gguf.Q6_K
		if kq || typ == gguf.Q4_K {
			bk, nbs = qkK, 3
		}
		for nb := 1; nb <= nbs; nb++ {
			cols := bk * nb
			for _, rows := range []int{1, 3, 15, 16, 17, 50} {
				enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.05))
				if err != nil {
					t.Fatal(err)
				}
				raw := rows%2 == 1 && nb%2 == 1
				if raw {
					enc = randBlocks(r, typ, rows, nb)
				}
				m, err := NewMatrix(typ, rows, cols, enc)
				if err != nil {
					t.Fatal(err)
				}
				for _, T := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 33} {
					x := randVec(r, T*cols, 1)
					if raw {
						for i := 0; i < len(x); i += 7 {
							x[i] *= 30
						}
					}
					qx := make([]*QVec, T)
					for tok := range qx {
						qx[tok] = m.NewActivation()
						qx[tok].Quantize(x[tok*cols : (tok+1)*cols])
					}
					if (kq && hasK8Kernel(typ) || !kq && hasAVX512 || rows >= 2 && hasPk4Kernel(typ, T, cols)) && T >= 2 {
						tp := m.packTokens(T, qx)
						k := m.mulTokens(0, min(rows, 16), make([]float32, T*rows), T, qx, tp)
						tp.release()
						// A short last group of Q5_K or Q6_K may be
						// left to the row kernels, and so may a last
						// single token of a Q4_K batch too small for the
						// sixteen-row kernel.
						q4kSmall := typ == gguf.Q4_K && T < k16MinTokens && T%4 == 1 && k == T-1
						if k != T && (!kq || k != T&^7) && !q4kSmall {
							t.Fatalf("%s rows=%d cols=%d raw=%v T=%d: multi-token kernel took %d tokens", typ, rows, cols, raw, T, k)
						}
					}
					for _, workers := range []int{1, 2} {
						p := NewPool(workers)
						got := make([]float32, T*rows+1)
						got[T*rows] = 42
						MatMul(p, m, got[:T*rows], x, T, qx)
						if got[T*rows] != 42 {
							t.Fatalf("%s: wrote past the output", typ)
						}
						want := make([]float32, rows)
						for tok := range T {
							MatVec(p, m, want, x[tok*cols:(tok+1)*cols], qx[tok])
							for i, w := range want {
								if g := got[tok*rows+i]; math.Float32bits(g) != math.Float32bits(w) {
									t.Fatalf("%s rows=%d cols=%d raw=%v T=%d workers=%d token %d row %d: MatMul %v, MatVec %v", typ, rows, cols, raw, T, workers, tok, i, g, w)
								}
							}
						}
						p.Close()
					}
				}
			}
		}
	}
}

// BenchmarkMatMulKernels times a 128-token MatMul over one 2048×2048
// matrix with the multi-token kernels on and off (activation already
// quantised), one worker: the compute the kernels save.
func BenchmarkMatMulKernels(b *testing.B) {
	r := rand.New(rand.NewPCG(53, 54))
	const T, rows, cols = 128, 2048, 2048
	x := randVec(r, T*cols, 1)
	p := NewPool(1)
	defer p.Close()
	defer func() { matMulKernels = true }()
	for _, typ := range []gguf.TensorType{gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			b.Fatal(err)
		}
		qx := make([]*QVec, T)
		for t := range qx {
			qx[t] = m.NewActivation()
			qx[t].Quantize(x[t*cols : (t+1)*cols])
		}
		out := make([]float32, T*rows)
		for _, on := range []bool{false, true} {
			name := typ.String() + "/rows"
			if on {
				name = typ.String() + "/tokens"
			}
			b.Run(name, func(b *testing.B) {
				matMulKernels = on
				for b.Loop() {
					MatMul(p, m, out, x, T, qx)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*T), "ns/token")
			})
		}
	}
}

package kernels

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
)

// randQ8Rows builds n Q8_0 rows of nb blocks, rowBytes apart, whose
// quants cover the whole int8 range (-128 included: a file may hold it)
// and whose scales are arbitrary finite float16 values, subnormals
// included.
func randQ8Rows(r *rand.Rand, n, nb, rowBytes int) []byte {
	w := make([]byte, n*rowBytes)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for i := 0; i < n; i++ {
		for b := 0; b < nb; b++ {
			blk := w[i*rowBytes+b*34:]
			h := uint16(r.Uint32()) &^ (0x1f << 10) // exponent below 31: finite
			h |= uint16(r.IntN(31)) << 10
			blk[0], blk[1] = byte(h), byte(h>>8)
			if b%3 == 0 { // extremes, in every lane
				for j := 0; j < 32; j++ {
					blk[2+j] = byte(int8([]int{-128, 127, -127, 0}[(j+i)%4]))
				}
			}
		}
	}
	return w
}

// randQVec builds activation quants in [-127, 127] with the extremes
// present, as Quantize can produce them.
func randQVec(r *rand.Rand, nb int) *QVec {
	v := NewQVec(nb * 32)
	for i := range v.Q {
		v.Q[i] = int8(r.IntN(255) - 127)
	}
	for b := range v.D {
		v.D[b] = float32(r.ExpFloat64() * 0.05)
		if b%2 == 0 {
			for j := 0; j < 32; j += 2 {
				v.Q[b*32+j], v.Q[b*32+j+1] = 127, -127
			}
		}
	}
	return v
}

// refQ8Row is the exact value of one row's product: integer block sums
// (exact) scaled in float64.
func refQ8Row(row []byte, nb int, v *QVec) (sum, mag float64) {
	for b := 0; b < nb; b++ {
		blk := row[b*34:]
		var is int64
		for j := 0; j < 32; j++ {
			is += int64(int8(blk[2+j])) * int64(v.Q[b*32+j])
		}
		t := float64(gguf.F16ToF32(uint16(blk[0])|uint16(blk[1])<<8)) * float64(v.D[b]) * float64(is)
		sum += t
		mag += math.Abs(t)
	}
	return sum, mag
}

// TestDotQ8_0Rows checks the dispatched kernel (assembly where the CPU
// has it) and the portable one against exact sums, over row counts that
// exercise the four-row groups and the one-row tail, row strides wider
// than the data, and one to many blocks. It also checks that a row's
// value does not depend on its position in the call.
func TestDotQ8_0Rows(t *testing.T) {
	t.Logf("assembly kernel in use: %v", hasAVX2)
	r := rand.New(rand.NewPCG(21, 22))
	for _, nb := range []int{1, 2, 3, 18, 48} {
		for _, pad := range []int{0, 6} {
			for n := 1; n <= 9; n++ {
				rb := nb*34 + pad
				w := randQ8Rows(r, n, nb, rb)
				v := randQVec(r, nb)
				for _, k := range []struct {
					name string
					fn   func(w []byte, rowBytes, nb int, v *QVec, out []float32)
				}{{"dispatched", dotQ8_0Rows}, {"generic", dotQ8_0RowsGeneric}} {
					out := make([]float32, n+1)
					out[n] = 42 // must survive: writes stay within out[:n]
					k.fn(w, rb, nb, v, out[:n])
					if out[n] != 42 {
						t.Fatalf("%s nb=%d n=%d: wrote past the output", k.name, nb, n)
					}
					for i := 0; i < n; i++ {
						want, mag := refQ8Row(w[i*rb:], nb, v)
						if math.Abs(float64(out[i])-want) > 1e-5*mag+1e-30 {
							t.Fatalf("%s nb=%d pad=%d n=%d row %d: %v, exact %v (Σ|terms| %v)", k.name, nb, pad, n, i, out[i], want, mag)
						}
						var one [1]float32
						k.fn(w[i*rb:i*rb+nb*34], nb*34, nb, v, one[:])
						if one[0] != out[i] {
							t.Fatalf("%s nb=%d n=%d row %d: %v alone, %v among %d rows", k.name, nb, n, i, one[0], out[i], n)
						}
					}
				}
			}
		}
	}
}

// TestDotQ8_0ShortInputs: the exported kernel stops at the shorter of
// row and activation, as it always has.
func TestDotQ8_0ShortInputs(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	w := randQ8Rows(r, 1, 4, 4*34)
	v := randQVec(r, 4)
	want2, _ := refQ8Row(w, 2, v)
	got := DotQ8_0(w[:2*34+5], v)
	if math.Abs(float64(got)-want2) > 1e-5*math.Abs(want2)+1e-30 {
		t.Errorf("row of 2 blocks: %v, want %v", got, want2)
	}
	short := &QVec{Q: v.Q[:64], D: v.D[:2], S: v.S[:2]}
	if got := DotQ8_0(w, short); math.Abs(float64(got)-want2) > 1e-5*math.Abs(want2)+1e-30 {
		t.Errorf("activation of 2 blocks: %v, want %v", got, want2)
	}
	if got := DotQ8_0(w[:10], v); got != 0 {
		t.Errorf("row shorter than a block: %v, want 0", got)
	}
}

// TestMatVecsMatchesSeparateProducts runs products of mixed types over
// one activation as a batch and compares each with its own MatVec.
func TestMatVecsMatchesSeparateProducts(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	cols := 192
	x := randVec(r, cols, 1)
	qx := NewQVec(cols)
	qx.Quantize(x)
	var ms []*Matrix
	for _, tc := range []struct {
		typ  gguf.TensorType
		rows int
	}{{gguf.Q8_0, 301}, {gguf.F32, 7}, {gguf.Q8_0, 64}, {gguf.Q4_0, 33}, {gguf.F16, 5}} {
		enc, err := gguf.Encode(tc.typ, randVec(r, tc.rows*cols, 0.1))
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMatrix(tc.typ, tc.rows, cols, enc)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	for _, workers := range []int{1, 2, 3} {
		p := NewPool(workers)
		mv := MatVecs{X: x, QX: qx}
		for _, m := range ms {
			mv.Prods = append(mv.Prods, Product{M: m, Out: make([]float32, m.Rows)})
		}
		mv.Run(p)
		for k, pr := range mv.Prods {
			want := make([]float32, pr.M.Rows)
			MatVec(p, pr.M, want, x, qx)
			for i := range want {
				if pr.Out[i] != want[i] {
					t.Fatalf("workers=%d product %d (%s) row %d: batch %v, alone %v", workers, k, pr.M.Type, i, pr.Out[i], want[i])
				}
			}
		}
		p.Close()
	}
}

// TestPoolCoversEveryIndexOnce runs many loops back to back (the
// spinning path) and some after the workers have parked (the wake
// path), checking each index is visited exactly once per loop.
func TestPoolCoversEveryIndexOnce(t *testing.T) {
	for _, workers := range []int{1, 2, 3, 8} {
		p := NewPool(workers)
		for loop := 0; loop < 400; loop++ {
			if loop%100 == 99 {
				time.Sleep(2 * spinFor)
			}
			n := 1 + loop*37%1000
			hits := make([]atomic.Int32, n)
			p.For(n, 1+loop%7, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			for i := range hits {
				if h := hits[i].Load(); h != 1 {
					t.Fatalf("workers=%d loop %d n=%d: index %d visited %d times", workers, loop, n, i, h)
				}
			}
		}
		p.Close()
	}
}

// TestPoolUsesHelpers: while the caller holds one chunk, another
// goroutine of the pool takes the rest, so the pool is more than a
// serial loop. Asserted for one worker too: it must not wait on helpers
// it does not have.
func TestPoolUsesHelpers(t *testing.T) {
	for _, tc := range []struct {
		workers    int
		concurrent bool
		wait       time.Duration
	}{{1, false, 20 * time.Millisecond}, {2, true, 2 * time.Second}, {3, true, 2 * time.Second}} {
		p := NewPool(tc.workers)
		var others atomic.Int32
		concurrent := false
		p.For(64, 1, func(lo, hi int) {
			if lo != 0 {
				others.Add(1)
				return
			}
			for deadline := time.Now().Add(tc.wait); time.Now().Before(deadline); {
				if others.Load() > 0 {
					concurrent = true
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
		p.Close()
		if concurrent != tc.concurrent {
			t.Errorf("workers=%d: chunks ran concurrently: %v, want %v", tc.workers, concurrent, tc.concurrent)
		}
	}
}

// TestDotsAxpys checks the strided attention kernels (assembly where the
// CPU has it) against float64 sums, for head sizes the assembly takes
// and ones that fall back to Go.
func TestDotsAxpys(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, hd := range []int{16, 20, 48, 64, 80, 128} {
		for _, n := range []int{1, 5, 17} {
			stride := 3*hd + 8
			q := randVec(r, hd, 1)
			k := randVec(r, n*stride, 1)
			p := randVec(r, n, 1)
			scores := make([]float32, n+1)
			scores[n] = 42
			dots(q, k, stride, scores[:n])
			out := randVec(r, hd+1, 1)
			out0 := append([]float32(nil), out...)
			axpys(out[:hd], p, k, stride)
			if scores[n] != 42 || out[hd] != out0[hd] {
				t.Fatalf("hd=%d n=%d: wrote past the output", hd, n)
			}
			for tt := 0; tt < n; tt++ {
				var want, mag float64
				for i := 0; i < hd; i++ {
					want += float64(q[i]) * float64(k[tt*stride+i])
					mag += math.Abs(float64(q[i]) * float64(k[tt*stride+i]))
				}
				if math.Abs(float64(scores[tt])-want) > 1e-6*mag {
					t.Fatalf("dots hd=%d n=%d t=%d: %v, want %v", hd, n, tt, scores[tt], want)
				}
			}
			for i := 0; i < hd; i++ {
				want, mag := float64(out0[i]), math.Abs(float64(out0[i]))
				for tt := 0; tt < n; tt++ {
					want += float64(p[tt]) * float64(k[tt*stride+i])
					mag += math.Abs(float64(p[tt]) * float64(k[tt*stride+i]))
				}
				if math.Abs(float64(out[i])-want) > 1e-6*mag {
					t.Fatalf("axpys hd=%d n=%d i=%d: %v, want %v", hd, n, i, out[i], want)
				}
			}
		}
	}
}

// TestQuantizeRoundsLikeRoundf: the quants are exactly roundf(x/d), ties
// away from zero, for values that land on and next to the ties.
func TestQuantizeRoundsLikeRoundf(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	x := randVec(r, 64*32, 2)
	for b := 0; b < 64; b += 2 { // blocks whose values sit on ties: d = 1
		x[b*32] = 127
		for j := 1; j < 32; j++ {
			x[b*32+j] = float32(r.IntN(253)-126) + []float32{0.5, -0.5, 0.49999997, 0.50000006}[j%4]
		}
	}
	v := NewQVec(len(x))
	v.Quantize(x)
	for b := range v.D {
		id := float32(0)
		if v.D[b] != 0 {
			id = 1 / v.D[b]
		}
		for j := 0; j < 32; j++ {
			i := b*32 + j
			if want := int8(math.Round(float64(x[i] * id))); v.Q[i] != want {
				t.Fatalf("x[%d]=%v (d=%v): quant %d, roundf gives %d", i, x[i], v.D[b], v.Q[i], want)
			}
		}
	}
}

package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"meshd/engine/runner/gguf"
)

func randVec(r *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64() * std)
	}
	return x
}

func refDot(w []float32, x []float32) float64 {
	var s float64
	for i := range w {
		s += float64(w[i]) * float64(x[i])
	}
	return s
}

func TestQuantizeQVec(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	x := randVec(r, 256, 3)
	v := NewQVec(len(x))
	v.Quantize(x)
	for b := range v.D {
		var sum int32
		for j := 0; j < 32; j++ {
			i := b*32 + j
			got := float64(v.Q[i]) * float64(v.D[b])
			// rounding to the nearest quant step bounds the error by d/2
			if math.Abs(got-float64(x[i])) > float64(v.D[b])/2+1e-6 {
				t.Fatalf("x[%d]=%v quantised to %v (d=%v)", i, x[i], got, v.D[b])
			}
			sum += int32(v.Q[i])
		}
		if sum != v.S[b] {
			t.Fatalf("block %d sum %d, recorded %d", b, sum, v.S[b])
		}
	}
}

// TestDotProducts compares every row kernel with a float64 dot of the
// decoded row and the exact activation. Quantised kernels also quantise
// the activation, so their tolerance is relative to Σ|w·x|.
func TestDotProducts(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		typ gguf.TensorType
		tol float64 // relative to Σ|w_i x_i|
	}{
		{gguf.F32, 1e-5}, {gguf.F16, 1e-5}, {gguf.BF16, 1e-5}, {gguf.Q8_0, 0.01}, {gguf.Q4_0, 0.01},
		{gguf.Q4_1, 0.01}, {gguf.Q5_0, 0.01}, {gguf.Q5_1, 0.01}, {gguf.Q4_K, 0.01}, {gguf.Q5_K, 0.01}, {gguf.Q6_K, 0.01},
	} {
		for _, n := range []int{32, 64, 256, 576, 1536} {
			if n%int(tc.typ.BlockSize()) != 0 {
				continue
			}
			w := randVec(r, n, 0.05)
			x := randVec(r, n, 1)
			enc, err := gguf.Encode(tc.typ, w)
			if err != nil {
				t.Fatal(err)
			}
			wd, err := gguf.Decode(tc.typ, enc, n)
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMatrix(tc.typ, 1, n, enc)
			if err != nil {
				t.Fatal(err)
			}
			qx := NewQVec(n)
			qx.Quantize(x)
			got := float64(m.DotRow(0, x, qx))
			want := refDot(wd, x)
			if bf16DPActive(tc.typ, n) {
				// The activation the kernel reads: x in bfloat16.
				xr := make([]float32, n)
				for i, v := range x {
					xr[i] = gguf.BF16ToF32(gguf.F32ToBF16(v))
				}
				want = refDot(wd, xr)
			}
			var mag float64
			for i := range wd {
				mag += math.Abs(float64(wd[i]) * float64(x[i]))
			}
			if math.Abs(got-want) > tc.tol*mag {
				t.Errorf("%s n=%d: dot %v, reference %v (Σ|wx| %v)", tc.typ, n, got, want, mag)
			}
		}
	}
}

func TestMatVecMatchesReferenceAcrossPools(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rows, cols := 300, 256
	w := randVec(r, rows*cols, 0.1)
	x := randVec(r, cols, 1)
	qx := NewQVec(cols)
	qx.Quantize(x)
	for _, typ := range allTypes {
		enc, _ := gguf.Encode(typ, w)
		m, err := NewMatrix(typ, rows, cols, enc)
		if err != nil {
			t.Fatal(err)
		}
		var first []float32
		for _, workers := range []int{1, 2, 3, 8} {
			p := NewPool(workers)
			out := make([]float32, rows)
			MatVec(p, m, out, x, qx)
			p.Close()
			for i := range out {
				if want := m.DotRow(i, x, qx); out[i] != want {
					t.Fatalf("%s workers=%d row %d: %v, single-row kernel %v", typ, workers, i, out[i], want)
				}
			}
			if first == nil {
				first = out
				wd, _ := gguf.Decode(typ, enc, rows*cols)
				for i := range out {
					want := refDot(wd[i*cols:(i+1)*cols], x)
					if math.Abs(float64(out[i])-want) > 0.05*math.Sqrt(float64(cols))*0.1 {
						t.Fatalf("%s row %d: %v, reference %v", typ, i, out[i], want)
					}
				}
			}
		}
	}
}

func TestMatrixRejectsBadShapes(t *testing.T) {
	if _, err := NewMatrix(gguf.Q8_0, 2, 32, make([]byte, 34)); err == nil {
		t.Error("short data accepted")
	}
	if _, err := NewMatrix(gguf.Q8_0, 1, 33, make([]byte, 34)); err == nil {
		t.Error("row length not a multiple of 32 accepted")
	}
	if _, err := NewMatrix(gguf.Q2_K, 1, 256, make([]byte, 84)); err == nil {
		t.Error("unsupported type accepted")
	}
}

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := randVec(r, 576, 2)
	w := randVec(r, 576, 1)
	out := make([]float32, len(x))
	RMSNorm(out, x, w, 1e-5)
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	s := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
	for i := range x {
		want := float64(x[i]) * s * float64(w[i])
		if math.Abs(float64(out[i])-want) > 1e-5*math.Max(1, math.Abs(want)) {
			t.Fatalf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
}

func TestRopeNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	hd, heads := 64, 3
	for _, pos := range []int{0, 1, 17, 2047} {
		x := randVec(r, hd*heads, 1)
		orig := append([]float32(nil), x...)
		cos, sin := make([]float32, hd/2), make([]float32, hd/2)
		RopeAngles(pos, 10000, hd, cos, sin)
		RopeNorm(x, hd, cos, sin)
		for h := 0; h < heads; h++ {
			for i := 0; i < hd/2; i++ {
				th := float64(pos) * math.Pow(10000, -2*float64(i)/float64(hd))
				a, b := float64(orig[h*hd+2*i]), float64(orig[h*hd+2*i+1])
				w0 := a*math.Cos(th) - b*math.Sin(th)
				w1 := a*math.Sin(th) + b*math.Cos(th)
				if math.Abs(float64(x[h*hd+2*i])-w0) > 1e-4 || math.Abs(float64(x[h*hd+2*i+1])-w1) > 1e-4 {
					t.Fatalf("pos %d head %d pair %d: (%v,%v), want (%v,%v)", pos, h, i, x[h*hd+2*i], x[h*hd+2*i+1], w0, w1)
				}
			}
		}
	}
}

func TestSoftmax(t *testing.T) {
	x := []float32{1, 2, 3, 1000, -1000}
	Softmax(x)
	ref := []float64{1, 2, 3, 1000, -1000}
	var sum float64
	for i := range ref {
		ref[i] = math.Exp(ref[i] - 1000)
		sum += ref[i]
	}
	for i := range x {
		if math.Abs(float64(x[i])-ref[i]/sum) > 1e-6 {
			t.Fatalf("softmax[%d] = %v, want %v", i, x[i], ref[i]/sum)
		}
	}
	for _, v := range x {
		if math.IsNaN(float64(v)) {
			t.Fatal("NaN from large inputs")
		}
	}
}

func TestAttend(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	hd, n, stride, off := 16, 9, 48, 16
	q := randVec(r, hd, 1)
	k := randVec(r, n*stride, 1)
	v := randVec(r, n*stride, 1)
	out := make([]float32, hd)
	scale := float32(1 / math.Sqrt(float64(hd)))
	Attend(out, q, k, v, n, stride, off, scale, make([]float32, n))
	sc := make([]float64, n)
	var mx float64 = math.Inf(-1)
	for tt := 0; tt < n; tt++ {
		for i := 0; i < hd; i++ {
			sc[tt] += float64(q[i]) * float64(k[tt*stride+off+i])
		}
		sc[tt] *= float64(scale)
		mx = math.Max(mx, sc[tt])
	}
	var sum float64
	for tt := range sc {
		sc[tt] = math.Exp(sc[tt] - mx)
		sum += sc[tt]
	}
	for i := 0; i < hd; i++ {
		var want float64
		for tt := 0; tt < n; tt++ {
			want += sc[tt] / sum * float64(v[tt*stride+off+i])
		}
		if math.Abs(float64(out[i])-want) > 1e-5 {
			t.Fatalf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
}

func TestSiLUMul(t *testing.T) {
	g := []float32{-3, -0.5, 0, 0.5, 4}
	u := []float32{2, 1, 5, -1, 0.25}
	out := make([]float32, len(g))
	SiLUMul(out, g, u)
	for i := range g {
		want := float64(g[i]) / (1 + math.Exp(-float64(g[i]))) * float64(u[i])
		if math.Abs(float64(out[i])-want) > 1e-6 {
			t.Fatalf("out[%d] = %v, want %v", i, out[i], want)
		}
	}
}

func BenchmarkDotQ8_0(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	n := 1536
	enc, _ := gguf.Encode(gguf.Q8_0, randVec(r, n, 0.1))
	qx := NewQVec(n)
	qx.Quantize(randVec(r, n, 1))
	b.SetBytes(int64(len(enc)))
	var s float32
	for b.Loop() {
		s += DotQ8_0(enc, qx)
	}
	_ = s
}

func BenchmarkDotQ4_0(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	n := 1536
	enc, _ := gguf.Encode(gguf.Q4_0, randVec(r, n, 0.1))
	qx := NewQVec(n)
	qx.Quantize(randVec(r, n, 1))
	b.SetBytes(int64(len(enc)))
	var s float32
	for b.Loop() {
		s += DotQ4_0(enc, qx)
	}
	_ = s
}

package kernels

import "math"

// RMSNorm writes x / sqrt(mean(x²) + eps) ⊙ w to out.
func RMSNorm(out, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
	w = w[:len(x)]
	out = out[:len(x)]
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
}

// RopeAngles fills cos and sin (len nRot/2) for position pos:
// θ_i = pos · base^(−2i/nRot).
func RopeAngles(pos int, base float64, nRot int, cos, sin []float32) {
	for i := 0; i < nRot/2; i++ {
		theta := float64(pos) * math.Pow(base, -2*float64(i)/float64(nRot))
		s, c := math.Sincos(theta)
		cos[i], sin[i] = float32(c), float32(s)
	}
}

// RopeNorm rotates each head of x (heads of headDim values) in llama's
// NORM layout: adjacent pairs (x[2i], x[2i+1]) by angle θ_i, for the
// first len(cos) pairs of each head.
func RopeNorm(x []float32, headDim int, cos, sin []float32) {
	for h := 0; h+headDim <= len(x); h += headDim {
		v := x[h : h+headDim]
		for i := range cos {
			a, b := v[2*i], v[2*i+1]
			v[2*i] = a*cos[i] - b*sin[i]
			v[2*i+1] = a*sin[i] + b*cos[i]
		}
	}
}

// Softmax replaces x with exp(x − max) / Σ exp(x − max).
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		m = max(m, v)
	}
	for i, v := range x {
		x[i] = v - m
	}
	expF32(x, x)
	var sum float64
	for _, e := range x {
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// SiLUMul writes silu(g) ⊙ u to out (which may be g): g/(1+e^−g)·u,
// the exponential in vector chunks.
func SiLUMul(out, g, u []float32) {
	u = u[:len(g)]
	out = out[:len(g)]
	var e [256]float32
	for lo := 0; lo < len(g); lo += len(e) {
		gc := g[lo:min(lo+len(e), len(g))]
		ec := e[:len(gc)]
		for i, v := range gc {
			ec[i] = -v
		}
		expF32(ec, ec)
		uc, oc := u[lo:lo+len(gc)], out[lo:lo+len(gc)]
		for i, v := range gc {
			oc[i] = v / (1 + ec[i]) * uc[i]
		}
	}
}

// Add does x += y.
func Add(x, y []float32) {
	y = y[:len(x)]
	for i := range x {
		x[i] += y[i]
	}
}

// Dot is the float32 dot product of equal-length vectors.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

// Attend computes one query head's attention over n cached positions.
// k and v hold the cache rows (stride values apart) and the head's keys
// and values start at off within each row; scores needs room for n.
func Attend(out, q, k, v []float32, n, stride, off int, scale float32, scores []float32) {
	hd := len(q)
	scores = scores[:n]
	if n == 0 {
		clear(out[:hd])
		return
	}
	dots(q, k[off:], stride, scores)
	for t := range scores {
		scores[t] *= scale
	}
	Softmax(scores)
	out = out[:hd]
	clear(out)
	axpys(out, scores, v[off:], stride)
}

// dotsGeneric is dots in portable Go.
func dotsGeneric(q, k []float32, stride int, out []float32) {
	for t := range out {
		out[t] = Dot(q, k[t*stride:t*stride+len(q)])
	}
}

// axpysGeneric is axpys in portable Go.
func axpysGeneric(out, p, v []float32, stride int) {
	for t, pt := range p {
		row := v[t*stride : t*stride+len(out)]
		for i := range out {
			out[i] += pt * row[i]
		}
	}
}

package kernels

import (
	"fmt"

	"meshd/engine/runner/gguf"
)

// Matrix is a weight matrix W[Rows][Cols] kept in its encoded form; rows
// are contiguous, as ggml stores a tensor of dims {Cols, Rows}.
type Matrix struct {
	Type     gguf.TensorType
	Rows     int
	Cols     int
	Data     []byte
	rowBytes int
}

// NewMatrix wraps encoded data. Only the types with a dot product here are
// accepted: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and
// Q6_K.
func NewMatrix(t gguf.TensorType, rows, cols int, data []byte) (*Matrix, error) {
	if !Supports(t) {
		return nil, fmt.Errorf("kernels: tensor type %s is not supported", t)
	}
	if rows < 1 || cols < 1 || uint64(cols)%t.BlockSize() != 0 {
		return nil, fmt.Errorf("kernels: bad %s matrix shape %dx%d", t, rows, cols)
	}
	rb := int(t.RowBytes(uint64(cols)))
	if len(data) != rows*rb {
		return nil, fmt.Errorf("kernels: %s matrix %dx%d needs %d bytes, have %d", t, rows, cols, rows*rb, len(data))
	}
	return &Matrix{Type: t, Rows: rows, Cols: cols, Data: data, rowBytes: rb}, nil
}

// Supports reports whether NewMatrix accepts tensors of type t: what a
// model must be made of for the built-in runner to load it (a
// configuration check asks this of a GGUF header before any start).
func Supports(t gguf.TensorType) bool {
	switch t {
	case gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K:
		return true
	}
	return false
}

// Quantized reports whether products with m take a QVec activation. The
// K-quants (Q4_K, Q5_K, Q6_K) read its 256-value form, the others its
// 32-value form; NewQVec allocates both when the length allows, and
// NewActivation only those a set of matrices needs.
func (m *Matrix) Quantized() bool {
	switch m.Type {
	case gguf.F32, gguf.F16, gguf.BF16:
		return false
	}
	return true
}

// Bytes is the encoded size of the matrix: what one product reads.
func (m *Matrix) Bytes() int { return len(m.Data) }

// Row decodes row i into dst (len Cols).
func (m *Matrix) Row(i int, dst []float32) error {
	x, err := gguf.Decode(m.Type, m.Data[i*m.rowBytes:(i+1)*m.rowBytes], m.Cols)
	if err != nil {
		return err
	}
	copy(dst, x)
	return nil
}

// DotRow is the dot product of row i with x (float rows) or qx
// (quantised rows; qx must hold x quantised in the form the type reads).
// It runs the same kernel as the matrix products, so a row's value is
// the same here as in MatVec or MatMul.
func (m *Matrix) DotRow(i int, x []float32, qx *QVec) float32 {
	var out [1]float32
	m.dotRows(i, i+1, out[:], x, qx)
	return out[0]
}

// DotRows sets out[i-lo] to row i's product with x or qx (as in DotRow)
// for i in [lo, hi), with the kernels MatVec runs: for callers that split
// a product over the pool themselves, to fuse other work into each range.
func (m *Matrix) DotRows(lo, hi int, out, x []float32, qx *QVec) {
	m.dotRows(lo, hi, out, x, qx)
}

// dotRows sets out[i-lo] to row i's product for i in [lo, hi).
func (m *Matrix) dotRows(lo, hi int, out, x []float32, qx *QVec) {
	w := m.Data[lo*m.rowBytes : hi*m.rowBytes]
	out = out[:hi-lo]
	switch m.Type {
	case gguf.Q8_0:
		dotQ8_0Rows(w, m.rowBytes, m.Cols/32, qx, out)
	case gguf.Q4_0:
		dotQ4_0Rows(w, m.rowBytes, m.Cols/32, qx, out)
	case gguf.Q4_1:
		dotQ4_1Rows(w, m.rowBytes, m.Cols/32, qx, out)
	case gguf.Q5_0:
		dotQ5_0Rows(w, m.rowBytes, m.Cols/32, qx, out)
	case gguf.Q5_1:
		dotQ5_1Rows(w, m.rowBytes, m.Cols/32, qx, out)
	case gguf.Q4_K:
		m.needK(qx)
		dotQ4KRows(w, m.rowBytes, m.Cols/qkK, qx, out)
	case gguf.Q5_K:
		m.needK(qx)
		dotQ5KRows(w, m.rowBytes, m.Cols/qkK, qx, out)
	case gguf.Q6_K:
		m.needK(qx)
		dotQ6KRows(w, m.rowBytes, m.Cols/qkK, qx, out)
	case gguf.F16:
		dotF16Rows(w, m.rowBytes, x[:m.Cols], out)
	case gguf.BF16:
		dotBF16Rows(w, m.rowBytes, x[:m.Cols], out)
	default: // F32, the one type NewMatrix admits besides those above
		if !dotF32MatRows(w, m.rowBytes, x[:m.Cols], out) {
			dotF32Rows(w, m.rowBytes, x[:m.Cols], out)
		}
	}
}

// needK panics with a clear message when a K-quant product is handed an
// activation without the 256-value form: a caller's mistake that would
// otherwise surface as an index out of range deep in a kernel.
func (m *Matrix) needK(qx *QVec) {
	if len(qx.DK)*qkK < m.Cols {
		panic(fmt.Sprintf("kernels: %s matrix of %d columns needs a QVec with the 256-value form (NewQVec or NewActivation), got %d values", m.Type, m.Cols, len(qx.DK)*qkK))
	}
}

// Product is one matrix-vector product Out = M·x.
type Product struct {
	M   *Matrix
	Out []float32
}

// MatVecs is a set of products that read the same activation X (QX: X
// quantised, needed when any matrix is quantised), run as one pool loop
// over all their rows so the workers are dispatched once, not once per
// matrix. A caller that keeps one and refills it each step runs it
// without allocating.
type MatVecs struct {
	X     []float32
	QX    *QVec
	Prods []Product
}

// Run computes every product over the pool.
func (mv *MatVecs) Run(p *Pool) {
	rows, rb := 0, 0
	for _, pr := range mv.Prods {
		rows += pr.M.Rows
		rb = max(rb, pr.M.rowBytes)
	}
	// Chunks of roughly 64 KiB of weights or more keep scheduling a small
	// fraction of the work; multiples of 4 rows suit the four-row kernels.
	p.Run(rows, max(4, (64<<10)/rb)&^3, (*matVecsRanger)(mv))
}

type matVecsRanger MatVecs

// Range computes rows [lo, hi) of the products laid end to end.
func (r *matVecsRanger) Range(lo, hi int) {
	base := 0
	for _, pr := range r.Prods {
		end := base + pr.M.Rows
		if lo < end && hi > base {
			a, b := max(lo, base)-base, min(hi, end)-base
			pr.M.dotRows(a, b, pr.Out[a:b], r.X, r.QX)
		}
		base = end
	}
}

// MatVec computes out = W·x over the pool. For quantised matrices qx must
// hold x quantised (quantise once, share across the matrices that read
// the same activation).
func MatVec(p *Pool, m *Matrix, out, x []float32, qx *QVec) {
	mv := MatVecs{X: x, QX: qx, Prods: []Product{{M: m, Out: out[:m.Rows]}}}
	mv.Run(p)
}

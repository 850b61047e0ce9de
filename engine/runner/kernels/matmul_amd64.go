//go:build !purego

package kernels

import (
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"meshd/engine/runner/gguf"
)

// mmQ8Args is what the Q8_0 multi-token kernel reads for its four
// tokens: quants, scales and the output position of the first row of
// the tile (the kernel advances out as it stores). A group of fewer than
// four tokens repeats its last token: the repeat writes the same values
// to the same place.
type mmQ8Args struct {
	q   [4]*int8
	d   [4]*float32
	out [4]*float32
}

// mmKArgs is what the K-quant multi-token kernels read for their four
// tokens: quants, output positions (advanced as the kernel stores),
// bsums and scales.
type mmKArgs struct {
	q   [4]*int8
	out [4]*float32
	bs  [4]*int16
	dk  [4]*float32
}

// mmK8Args is what the eight-token Q4_K kernel reads: the tokens'
// quants, their output positions (advanced as the kernel stores) and
// the packed token data of the group (tokenPack).
type mmK8Args struct {
	q   [8]*int8
	out [8]*float32
	pk  *int16
}

// mulQ4Kx8AVX2 computes n Q4_K rows (rowBytes apart from w, nb
// super-blocks each) against the eight tokens of a, storing row r of
// token t at a.out[t][r].
//
//go:noescape
func mulQ4Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)

// mulQ5Kx8AVX512 is mulQ4Kx8AVX2 with AVX-512 for Q5_K rows, with the token pack
// of Q4_K (packK56); it needs hasAVX512Rows (GFNI forms the quants).
//
//go:noescape
func mulQ5Kx8AVX512(w *byte, rowBytes, nb, n int, a *mmK8Args)

// mulQ6Kx8AVX512 is mulQ5Kx8AVX512 for Q6_K rows, with packK56's Q6_K
// token pack (k6Words).
//
//go:noescape
func mulQ6Kx8AVX512(w *byte, rowBytes, nb, n int, a *mmK8Args)

// mulQ5Kx8AVX2 is mulQ5Kx8AVX512 with AVX2 alone (matmul8k_amd64.s),
// for CPUs without the AVX-512 row kernels.
//
//go:noescape
func mulQ5Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)

// mulQ6Kx8AVX2 is mulQ6Kx8AVX512 with AVX2 alone.
//
//go:noescape
func mulQ6Kx8AVX2(w *byte, rowBytes, nb, n int, a *mmK8Args)

// hasK8Kernel reports whether Q5_K or Q6_K matrices (typ) have an
// eight-token kernel here: with AVX-512 (the row kernels' extensions)
// or AVX2 alone.
func hasK8Kernel(typ gguf.TensorType) bool {
	return (typ == gguf.Q5_K || typ == gguf.Q6_K) && (hasAVX512Rows || hasAVX2)
}

// hasAVX512 selects the AVX-512 multi-token kernels: 64-byte integer
// products (BW) with the multiply-add of VNNI. The tests turn it off to
// run the AVX2 kernels too.
var hasAVX512 = hasAVX2 && cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VNNI

// k8Words is the packed data of eight tokens per super-block, in int16
// words: the pair sums of their bsums (8 × 8) and their scales dₐ (8
// float32, two words each).
const k8Words = 80

// tokenPack is what a product's multi-token kernels read of the tokens
// alone, computed once per MatMul rather than once per row tile: for the
// eight-token K-quant kernels, per group of eight tokens and super-block,
// the tokens' bsums (pair sums for Q4_K and Q5_K) and scales (see
// matmul8_amd64.s, matmul8k_amd64.s); for the sixteen-row kernels of
// the 32-value types, per token and block, the start values of the
// integer sums or float(S) (see matmul8q_amd64.s), and for the
// sixteen-row Q4_K kernel the bsums and dₐ of each group of four tokens
// (packK16).
type tokenPack struct {
	k8 []int16
	// q32 holds packQ32's q32Words words per token, or packK16's per
	// group of four.
	q32      []int32
	q32Words int
	// ds holds, for mulQ4_0Off, per group of four tokens (the last
	// repeating its last token) and block, the four tokens' dₐ; for
	// mulQ32x4 (packQ32x4) their dₐ, then their float(S).
	ds []float32
}

var tokenPacks = sync.Pool{New: func() any { return new(tokenPack) }}

// getTokenPack returns a pooled tokenPack with every part empty. The
// kernels tell one pack from another by which parts have room (mulK16
// takes a pack whose q32 fits it, the eight-token K-quant kernels one
// whose k8 does), so a part a packer does not fill must not keep what an
// earlier product left: a Q5_K pack of five tokens that kept a sixteen-row
// pack's q32 ran the sixteen-row kernel on another product's bsums.
func getTokenPack() *tokenPack {
	tp := tokenPacks.Get().(*tokenPack)
	tp.k8, tp.q32, tp.q32Words, tp.ds = tp.k8[:0], tp.q32[:0], 0, tp.ds[:0]
	return tp
}

// packTokens prepares the tokenPack of a product of m with T tokens, or
// returns nil when m's multi-token kernels need none.
func (m *Matrix) packTokens(T int, qx []*QVec) *tokenPack {
	if lay, ok := q32LayoutOf(m.Type); ok && hasAVX512 && T >= 2 && m.Cols >= 32 {
		return packQ32(lay.mul, m.Cols/32, T, qx)
	}
	if m.Type == gguf.Q4_0 && hasAVX2 && T >= 2 && m.Cols >= 32 {
		return packQ4_0Off(m.Cols/32, T, qx)
	}
	if hasPk4Kernel(m.Type, T, m.Cols) {
		return packQ32x4(m.Type, m.Cols/32, T, qx)
	}
	if hasK16Kernel(m.Type) && T >= k16MinTokens && m.Cols >= qkK {
		return m.packK16(T, qx)
	}
	if hasK8Kernel(m.Type) {
		return m.packK56(T, qx)
	}
	if !hasAVX2 || m.Type != gguf.Q4_K || T < 8 {
		return nil
	}
	nb := m.Cols / qkK
	groups := T / 8
	tp := getTokenPack()
	if cap(tp.k8) < groups*nb*k8Words {
		tp.k8 = make([]int16, groups*nb*k8Words)
	}
	pk := tp.k8[:groups*nb*k8Words]
	for g := range groups {
		for i := range 8 {
			v := qx[8*g+i]
			m.needK(v)
			bs, dk := v.BS[:nb*16], v.DK[:nb]
			// Token i's pair sums go to row i%4 of the 32-byte rows,
			// half i/4.
			o := g*nb*k8Words + (i%4)*16 + (i/4)*8
			for b := range nb {
				ps := (*[8]int16)(pk[o+b*k8Words:])
				s := (*[16]int16)(bs[16*b:])
				for j := range ps {
					ps[j] = s[2*j] + s[2*j+1]
				}
				bits := math.Float32bits(dk[b])
				f := g*nb*k8Words + b*k8Words + 64 + 2*i
				pk[f], pk[f+1] = int16(uint16(bits)), int16(uint16(bits>>16))
			}
		}
	}
	tp.k8 = pk
	return tp
}

// k6Words is Q6_K's packed data of eight tokens per super-block, in
// int16 words: each token's sixteen bsums, then their dₐ (8 float32, two
// words each).
const k6Words = 144

// kPadMin is the fewest tokens of a last, partial group that the Q5_K
// and Q6_K eight-token kernels take, with the group's last token
// repeated (the repeat writes the same values to the same place): below
// it the row kernels cost less than the kernel's eight token passes.
const kPadMin = 5

// kGroups is the number of eight-token groups of the Q5_K and Q6_K
// kernels for T tokens.
func kGroups(T int) int {
	g := T / 8
	if T%8 >= kPadMin {
		g++
	}
	return g
}

// packK56 prepares the token pack of the Q5_K and Q6_K eight-token
// kernels, per group of eight and super-block: for Q5_K the layout of
// Q4_K's (k8Words; the same scales and mins meet the same bsums), for
// Q6_K the tokens' bsums and dₐ (k6Words).
func (m *Matrix) packK56(T int, qx []*QVec) *tokenPack {
	groups := kGroups(T)
	if groups == 0 {
		return nil
	}
	nb := m.Cols / qkK
	words := k8Words
	if m.Type == gguf.Q6_K {
		words = k6Words
	}
	tp := getTokenPack()
	if cap(tp.k8) < groups*nb*words {
		tp.k8 = make([]int16, groups*nb*words)
	}
	pk := tp.k8[:groups*nb*words]
	for g := range groups {
		for i := range 8 {
			v := qx[min(8*g+i, T-1)]
			m.needK(v)
			bs, dk := v.BS[:nb*16], v.DK[:nb]
			for b := range nb {
				blk := pk[(g*nb+b)*words:][:words]
				s := (*[16]int16)(bs[16*b:])
				f := 128 + 2*i
				if words == k6Words {
					copy(blk[16*i:16*i+16], s[:])
				} else {
					// As packTokens packs Q4_K.
					ps := blk[(i%4)*16+(i/4)*8:][:8]
					for j := range ps {
						ps[j] = s[2*j] + s[2*j+1]
					}
					f = 64 + 2*i
				}
				bits := math.Float32bits(dk[b])
				blk[f], blk[f+1] = int16(uint16(bits)), int16(uint16(bits>>16))
			}
		}
	}
	tp.k8 = pk
	return tp
}

// packQ32 computes the token pack of the sixteen-row kernels for T
// tokens of nb blocks: q32OffsAVX2's offsets with multiplier mul (eight
// words per block) for Q4_0, Q5_0 and Q8_0, float(S) (one per block) for
// Q4_1 and Q5_1 (mul 0).
func packQ32(mul, nb, T int, qx []*QVec) *tokenPack {
	tp := getTokenPack()
	w := nb
	if mul != 0 {
		w = 8 * nb
	}
	if cap(tp.q32) < T*w {
		tp.q32 = make([]int32, T*w)
	}
	tp.q32, tp.q32Words = tp.q32[:T*w], w
	for t, v := range qx[:T] {
		o := tp.q32[t*w : (t+1)*w]
		if mul != 0 {
			_ = v.Q[nb*32-1]
			q32OffsAVX2(&v.Q[0], nb, &o[0], mul)
			continue
		}
		for b, s := range v.S[:nb] {
			o[b] = int32(math.Float32bits(float32(s)))
		}
	}
	return tp
}

// release returns tp, which may be nil, for reuse.
func (tp *tokenPack) release() {
	if tp != nil {
		tokenPacks.Put(tp)
	}
}

// mulQ8_0x2x4AVX2 computes pairs·2 rows (rowBytes apart from w, nb
// blocks each) against the four tokens of a, storing row r of token t
// at a.out[t][r].
//
//go:noescape
func mulQ8_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)

// mulQ4Kx4AVX2 computes n Q4_K rows against the four tokens of a.
//
//go:noescape
func mulQ4Kx4AVX2(w *byte, rowBytes, nb, n int, a *mmKArgs)

// mulQ4Kx2x4AVX2 computes pairs·2 Q4_K rows against the four tokens of
// a, each row as mulQ4Kx4AVX2 does.
//
//go:noescape
func mulQ4Kx2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmKArgs)

// mulQ4_0x2x4AVX2 computes pairs·2 Q4_0 rows against the four tokens of
// a (quants and scales in Q8_0 form), each row with the arithmetic of
// dotQ4_0RowsAVX2.
//
//go:noescape
func mulQ4_0x2x4AVX2(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)

// mulTokens computes rows [r0, r1) of out for tokens [0, k) with the
// multi-token kernel of m's type and returns k: 0 where there is none
// (then MatMul runs every token through the row kernels). tp is
// packTokens' result for the product.
func (m *Matrix) mulTokens(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	if !hasAVX2 || T < 2 {
		return 0
	}
	switch m.Type {
	case gguf.Q8_0:
		return m.mulQ8_0(r0, r1, out, T, qx, tp)
	case gguf.Q4_K:
		return m.mulQ4K(r0, r1, out, T, qx, tp)
	case gguf.Q4_0:
		return m.mulQ4_0(r0, r1, out, T, qx, tp)
	case gguf.Q4_1, gguf.Q5_0, gguf.Q5_1:
		if k := m.mulQ32(r0, r1, out, T, qx, tp); k > 0 {
			return k
		}
		return m.mulQ32x4(r0, r1, out, T, qx, tp)
	case gguf.Q5_K, gguf.Q6_K:
		if hasK16Kernel(m.Type) && r1-r0 <= 16 {
			if k := m.mulK16(r0, r1, out, T, qx, tp); k > 0 {
				return k
			}
		}
		return m.mulK56(r0, r1, out, T, qx, tp)
	}
	return 0
}

// mulQ8_0 runs the sixteen-row kernel where the CPU has AVX-512 (tp
// then holds its token pack), else the two-row × four-token AVX2 one
// over packQ32x4's pack.
func (m *Matrix) mulQ8_0(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	if k := m.mulQ32(r0, r1, out, T, qx, tp); k > 0 {
		return k
	}
	if k := m.mulQ32x4(r0, r1, out, T, qx, tp); k > 0 {
		return k
	}
	return m.mulPairs(r0, r1, out, T, qx, mulQ8_0x2x4AVX2)
}

// mulQ4_0 runs the sixteen-row kernel where the CPU has AVX-512 (tp
// then holds its token pack), else the two-row × four-token AVX2 one
// over packQ4_0Off's pack.
func (m *Matrix) mulQ4_0(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	if k := m.mulQ32(r0, r1, out, T, qx, tp); k > 0 {
		return k
	}
	if k := m.mulQ4_0Off(r0, r1, out, T, qx, tp); k > 0 {
		return k
	}
	return m.mulPairs(r0, r1, out, T, qx, mulQ4_0x2x4AVX2)
}

// q32Rows tells q32Pack16AVX512 where a tile's sixteen rows lie (byte
// offsets from the first, as int64 for the row loads and int32 for the
// gathers; a tile of fewer repeats its last row) and the layout of the
// type's blocks (q32Layout: the first four fields) with the packed
// block's size.
type q32Rows struct {
	off    [16]int64
	off32  [16]int32
	bsize  int64
	qs     int64
	qh     int64
	hasMin int64
	stride int64
}

// q32Layout is a 32-value type's block as the sixteen-row kernels see
// it: its size, the offsets of the quants and of qh (−1: none), whether
// m follows d (1) or not (0), and the multiplier of the activation sums
// that start the integer sums (8 for Q4_0's q − 8, 16 for Q5_0's q − 16,
// 128 for Q8_0's quants packed as w + 128, 0 for the types with a
// minimum).
type q32Layout struct{ bsize, qs, qh, hasMin, mul int }

func q32LayoutOf(t gguf.TensorType) (q32Layout, bool) {
	switch t {
	case gguf.Q8_0:
		return q32Layout{34, 2, -1, 0, 128}, true
	case gguf.Q4_0:
		return q32Layout{18, 2, -1, 0, 8}, true
	case gguf.Q5_0:
		return q32Layout{22, 6, 2, 0, 16}, true
	case gguf.Q4_1:
		return q32Layout{20, 4, -1, 1, 0}, true
	case gguf.Q5_1:
		return q32Layout{24, 8, 4, 1, 0}, true
	}
	return q32Layout{}, false
}

// mmQ32Args is what the sixteen-row kernels read for their three tokens:
// quants, scales, the token pack's offsets or float(S) and the output
// position of the tile's first row. A group of fewer than three repeats
// its last token: the repeat writes the same values to the same place.
type mmQ32Args struct {
	q   [3]*int8
	d   [3]*float32
	o   [3]*int32
	out [3]*float32
}

// q32Tile is a worker's packing of a tile's rows, kept for the next
// tile; buf has 64 bytes to spare to align it.
type q32Tile struct{ buf []byte }

var q32Tiles = sync.Pool{New: func() any { return new(q32Tile) }}

// q32OffsAVX2 sets o[8b+k] to −mul times the sum of quants 4k to 4k+3 of
// block b, for nb blocks.
//
//go:noescape
func q32OffsAVX2(q *int8, nb int, o *int32, mul int)

// q32Pack16AVX512 packs nb blocks of the sixteen rows at w +
// rows.off[i] into dst (rows.stride·nb bytes, 64-byte aligned) for the
// sixteen-row kernels.
//
//go:noescape
func q32Pack16AVX512(w *byte, rows *q32Rows, nb int, dst *byte)

// q8Pack16AVX512 is q32Pack16AVX512 for Q8_0 rows, whose packing
// (576 bytes a block) mulQ32x16x3AVX512 reads as it reads Q4_0's.
//
//go:noescape
func q8Pack16AVX512(w *byte, rows *q32Rows, nb int, dst *byte)

// mulQ32x16x3AVX512 computes the Q4_0, Q5_0 or Q8_0 rows packed at wt
// (nb blocks) against the three tokens of a, storing row r of token t
// at a.out[t][r] for the bits r set in mask.
//
//go:noescape
func mulQ32x16x3AVX512(wt *byte, nb int, a *mmQ32Args, mask uint16)

// mulQ32Mx16x3AVX512 is mulQ32x16x3AVX512 for Q4_1 and Q5_1 rows.
//
//go:noescape
func mulQ32Mx16x3AVX512(wt *byte, nb int, a *mmQ32Args, mask uint16)

// mulQ32 packs rows [r0, r1) (at most sixteen) of a Q4_0, Q4_1, Q5_0,
// Q5_1 or Q8_0 matrix once and runs every token against them, three at
// a time, returning T; 0 where the sixteen-row kernels do not apply.
func (m *Matrix) mulQ32(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	nb := m.Cols / 32
	n := r1 - r0
	if !hasAVX512 || tp == nil || nb == 0 || len(tp.q32) != T*tp.q32Words || n <= 0 || n > 16 {
		return 0
	}
	lay, _ := q32LayoutOf(m.Type)
	rb := m.rowBytes
	_ = m.Data[(r1-1)*rb+nb*lay.bsize-1]
	_ = out[(T-1)*m.Rows+r1-1]
	// The packed block: eight lane registers and d, then m.
	rows := q32Rows{bsize: int64(lay.bsize), qs: int64(lay.qs), qh: int64(lay.qh), hasMin: int64(lay.hasMin), stride: 576 + 64*int64(lay.hasMin)}
	for i := range rows.off {
		off := min(i, n-1) * rb
		rows.off[i], rows.off32[i] = int64(off), int32(off)
	}
	tile := q32Tiles.Get().(*q32Tile)
	if need := nb*int(rows.stride) + 64; len(tile.buf) < need {
		tile.buf = make([]byte, need)
	}
	wt := &tile.buf[int(-uintptr(unsafe.Pointer(&tile.buf[0]))&63)]
	if m.Type == gguf.Q8_0 {
		q8Pack16AVX512(&m.Data[r0*rb], &rows, nb, wt)
	} else {
		q32Pack16AVX512(&m.Data[r0*rb], &rows, nb, wt)
	}
	kernel := mulQ32x16x3AVX512
	if lay.hasMin != 0 {
		kernel = mulQ32Mx16x3AVX512
	}
	mask := uint16(1<<n - 1)
	var a mmQ32Args
	for t := 0; t < T; t += 3 {
		for i := range 3 {
			tk := min(t+i, T-1)
			v := qx[tk]
			_ = v.Q[nb*32-1]
			_ = v.D[nb-1]
			a.q[i], a.d[i], a.o[i], a.out[i] = &v.Q[0], &v.D[0], &tp.q32[tk*tp.q32Words], &out[tk*m.Rows+r0]
		}
		kernel(wt, nb, &a, mask)
	}
	q32Tiles.Put(tile)
	return T
}

// mulPairs runs a two-row × four-token kernel over Q8_0-form
// activations (Q8_0 and Q4_0 rows); an odd last row goes through the
// row kernel for the tokens the kernel took.
func (m *Matrix) mulPairs(r0, r1 int, out []float32, T int, qx []*QVec, kernel func(w *byte, rowBytes, nb, pairs int, a *mmQ8Args)) int {
	nb := m.Cols / 32
	pairs := (r1 - r0) / 2
	if pairs == 0 {
		return 0
	}
	rb := m.rowBytes
	_ = m.Data[(r0+2*pairs)*rb-1]
	done := 0
	var a mmQ8Args
	for t := 0; t+2 <= T; t += 4 {
		k := min(4, T-t)
		for i := range 4 {
			tk := t + min(i, k-1)
			v := qx[tk]
			_ = v.Q[nb*32-1]
			_ = v.D[nb-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r0+2*pairs]
			a.q[i], a.d[i], a.out[i] = &v.Q[0], &v.D[0], &o[0]
		}
		kernel(&m.Data[r0*rb], rb, nb, pairs, &a)
		done = t + k
	}
	if r := r0 + 2*pairs; r < r1 {
		for t := 0; t < done; t++ {
			m.dotRows(r, r1, out[t*m.Rows+r:t*m.Rows+r1], nil, qx[t])
		}
	}
	return done
}

// mmK16Args is what the sixteen-row Q4_K kernel reads for its four
// tokens: quants, the pass data (k16Words words a super-block: the
// tokens' bsums, then their dₐ) and the output position of the tile's
// first row. A group of fewer than four repeats its last token: the
// repeat writes the same values to the same place.
type mmK16Args struct {
	q   [4]*int8
	pd  *int32
	out [4]*float32
}

// k16MinTokens is the fewest tokens the sixteen-row Q4_K kernel takes:
// packing a tile costs about as much as a few tokens' products, so a
// small batch (a decode step shared by a few requests) is faster through
// the two-row × four-token kernel. One worker, 2048×2048, ns per token,
// sixteen-row against the others: 2 tokens 167660/115640, 4 86936/63387,
// 8 44442/54903.
const k16MinTokens = 6

// k16Words is the pass data of mulQ4Kx16x4AVX512 per super-block, in
// 32-bit words: eight per token's sixteen bsums (room for six tokens),
// then the tokens' dₐ at 48; 256 bytes so that the kernel's super-block
// index reaches it as it reaches the quants.
const k16Words = 64

// k16Block is the packed size of a Q4_K super-block of sixteen rows, in
// 32-bit words: per sub-block eight lane registers, the scales and the
// mins (160 words), then d and dmin.
const k16Block = 8*160 + 32

// mulQ4Kx16x4AVX512 computes the Q4_K rows packed at wt (nb super-blocks,
// see mulQ4K16) against the four tokens of a, storing row r of token t at
// a.out[t][r] for the bits r set in mask.
//
//go:noescape
func mulQ4Kx16x4AVX512(wt *byte, nb int, a *mmK16Args, mask uint16)

// k16Tile is a worker's packing of a tile's rows, kept for the next
// tile.
type k16Tile struct{ rows []uint32 }

var k16Tiles = sync.Pool{New: func() any { return new(k16Tile) }}

// packQ4K16AVX512 packs nb super-blocks of the sixteen rows at w +
// off[i] into dst (nb·k16Block words) for mulQ4Kx16x4AVX512: per
// sub-block the lane registers (row r's four quants of lane k in dword
// r), the scales as int32 and the mins as int16 pairs (m, m); then d and
// dmin as float32.
//
//go:noescape
func packQ4K16AVX512(w *byte, off *int32, nb int, dst *byte)

// packQ5K16AVX512 is packQ4K16AVX512 for Q5_K rows: the same layout,
// the lane registers holding the 5-bit quants, for mulQ4Kx16x4AVX512.
//
//go:noescape
func packQ5K16AVX512(w *byte, off *int32, nb int, dst *byte)

// mulQ6Kx16x4AVX512 is mulQ4Kx16x4AVX512 for Q6_K rows packed by
// packQ6K16AVX512 (k6Block words a super-block).
//
//go:noescape
func mulQ6Kx16x4AVX512(wt *byte, nb int, a *mmK16Args, mask uint16)

// packQ6K16AVX512 packs nb Q6_K super-blocks of the sixteen rows at w +
// off[i] into dst (nb·k6Block words) for mulQ6Kx16x4AVX512: per
// sub-block the lane registers (6-bit quants), the two scales as int32
// and the pair (32·scale₀, 32·scale₁) as int16; then d as float32.
//
//go:noescape
func packQ6K16AVX512(w *byte, off *int32, nb int, dst *byte)

// k6Block is the packed size of a Q6_K super-block of sixteen rows, in
// 32-bit words: per sub-block eight lane registers, two scales and the
// mins (176 words), then d.
const k6Block = 8*176 + 16

// hasK16Kernel reports whether typ's matrices run through the
// sixteen-row kernels (Q4_K, Q5_K and Q6_K, with AVX-512).
func hasK16Kernel(typ gguf.TensorType) bool {
	return (typ == gguf.Q4_K || typ == gguf.Q5_K || typ == gguf.Q6_K) && hasAVX512
}

// packK16 computes the pass data of mulQ4Kx16x4AVX512 for T tokens,
// per group of four (the last repeating its last token): q32Words words
// a group.
func (m *Matrix) packK16(T int, qx []*QVec) *tokenPack {
	nb := m.Cols / qkK
	tp := getTokenPack()
	w := nb * k16Words
	groups := (T + 3) / 4
	if cap(tp.q32) < groups*w {
		tp.q32 = make([]int32, groups*w)
	}
	tp.q32, tp.q32Words = tp.q32[:groups*w], w
	for g := range groups {
		for i := range 4 {
			v := qx[min(4*g+i, T-1)]
			m.needK(v)
			bs, dk := v.BS[:nb*16], v.DK[:nb]
			for b := range nb {
				o := (*[k16Words]int32)(tp.q32[g*w+b*k16Words:])
				s := (*[16]int16)(bs[16*b:])
				for j := range 8 {
					o[8*i+j] = int32(uint32(uint16(s[2*j])) | uint32(uint16(s[2*j+1]))<<16)
				}
				o[48+i] = int32(math.Float32bits(dk[b]))
			}
		}
	}
	return tp
}

// mulK16 packs rows [r0, r1) (at most sixteen) of a Q4_K, Q5_K or Q6_K
// matrix once and runs every token against them, four at a time, returning T;
// 0 where tp is not packK16's.
func (m *Matrix) mulK16(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	nb := m.Cols / qkK
	n := r1 - r0
	if tp == nil || tp.q32Words != nb*k16Words || len(tp.q32) != (T+3)/4*tp.q32Words || !hasK16Kernel(m.Type) {
		return 0
	}
	bsize, words, pack, kernel := 144, k16Block, packQ4K16AVX512, mulQ4Kx16x4AVX512
	switch m.Type {
	case gguf.Q5_K:
		bsize, pack = 176, packQ5K16AVX512
	case gguf.Q6_K:
		bsize, words, pack, kernel = 210, k6Block, packQ6K16AVX512, mulQ6Kx16x4AVX512
	}
	rb := m.rowBytes
	_ = out[(T-1)*m.Rows+r1-1]
	tile := k16Tiles.Get().(*k16Tile)
	if len(tile.rows) < nb*words {
		tile.rows = make([]uint32, nb*words)
	}
	_ = m.Data[(r1-1)*rb+nb*bsize-1]
	var off [16]int32
	for i := range off {
		off[i] = int32(min(i, n-1) * rb)
	}
	pack(&m.Data[r0*rb], &off[0], nb, (*byte)(unsafe.Pointer(&tile.rows[0])))
	mask := uint16(1<<n - 1)
	var a mmK16Args
	for t := 0; t < T; t += 4 {
		for i := range 4 {
			tk := min(t+i, T-1)
			v := qx[tk]
			_ = v.QK[nb*qkK-1]
			a.q[i], a.out[i] = &v.QK[0], &out[tk*m.Rows+r0]
		}
		a.pd = &tp.q32[t/4*tp.q32Words]
		kernel((*byte)(unsafe.Pointer(&tile.rows[0])), nb, &a, mask)
	}
	k16Tiles.Put(tile)
	return T
}

// mulQ4K runs the sixteen-row kernel where the CPU has AVX-512 (tp then
// holds packK16's data), else the eight-token kernel over the full
// groups of eight tokens (those tp packs), then the two-row × four-token
// kernel over the rest in groups of up to four.
func (m *Matrix) mulQ4K(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	nb := m.Cols / qkK
	n := r1 - r0
	if n == 0 || nb == 0 {
		return 0
	}
	if hasAVX512 && n <= 16 {
		if k := m.mulK16(r0, r1, out, T, qx, tp); k > 0 {
			return k
		}
	}
	pairs := n / 2
	rb := m.rowBytes
	_ = m.Data[r1*rb-1]
	done := 0
	if tp != nil {
		var a8 mmK8Args
		for g := 0; g < len(tp.k8)/(nb*k8Words); g++ {
			for i := range 8 {
				v := qx[8*g+i]
				_ = v.QK[nb*qkK-1]
				o := out[(8*g+i)*m.Rows+r0 : (8*g+i)*m.Rows+r1]
				a8.q[i], a8.out[i] = &v.QK[0], &o[0]
			}
			a8.pk = &tp.k8[g*nb*k8Words]
			mulQ4Kx8AVX2(&m.Data[r0*rb], rb, nb, n, &a8)
			done = 8 * (g + 1)
		}
	}
	var a mmKArgs
	for t := done; t+2 <= T; t += 4 {
		k := min(4, T-t)
		for i := range 4 {
			tk := t + min(i, k-1)
			v := qx[tk]
			m.needK(v)
			_ = v.QK[nb*qkK-1]
			_ = v.BS[nb*16-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r1]
			a.q[i], a.out[i], a.bs[i], a.dk[i] = &v.QK[0], &o[0], &v.BS[0], &v.DK[0]
		}
		if pairs > 0 {
			mulQ4Kx2x4AVX2(&m.Data[r0*rb], rb, nb, pairs, &a)
		}
		if n&1 != 0 {
			// a.out now points at the last row.
			mulQ4Kx4AVX2(&m.Data[(r1-1)*rb], rb, nb, 1, &a)
		}
		done = t + k
	}
	return done
}

// mulK56 runs the Q5_K or Q6_K eight-token kernel over the groups tp
// packs and returns the tokens they cover (kGroups); 0 without a kernel
// (hasK8Kernel) or a pack.
func (m *Matrix) mulK56(r0, r1 int, out []float32, T int, qx []*QVec, tp *tokenPack) int {
	nb := m.Cols / qkK
	n := r1 - r0
	words, bsize, kernel := k8Words, 176, mulQ5Kx8AVX512
	if m.Type == gguf.Q6_K {
		words, bsize, kernel = k6Words, 210, mulQ6Kx8AVX512
	}
	if !hasAVX512Rows {
		kernel = mulQ5Kx8AVX2
		if m.Type == gguf.Q6_K {
			kernel = mulQ6Kx8AVX2
		}
	}
	groups := kGroups(T)
	if !hasK8Kernel(m.Type) || tp == nil || n <= 0 || nb == 0 || groups == 0 || len(tp.k8) != groups*nb*words {
		return 0
	}
	rb := m.rowBytes
	_ = m.Data[(r1-1)*rb+nb*bsize-1]
	var a mmK8Args
	for g := range groups {
		for i := range 8 {
			tk := min(8*g+i, T-1)
			v := qx[tk]
			_ = v.QK[nb*qkK-1]
			o := out[tk*m.Rows+r0 : tk*m.Rows+r1]
			a.q[i], a.out[i] = &v.QK[0], &o[0]
		}
		a.pk = &tp.k8[g*nb*words]
		kernel(&m.Data[r0*rb], rb, nb, n, &a)
	}
	return min(8*groups, T)
}

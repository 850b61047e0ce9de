package kernels

import "time"

// The float GEMM's dispatch levels (gemmLevel): MatMul of an F16, BF16
// or F32 matrix runs the zmm kernels, the ymm kernels, or the row
// kernels per token. At gemmBF16 (AVX-512 with AVX512_BF16) BF16
// products, MatVec's and MatMul's alike, round the activations to
// bfloat16 and run VDPBF16PS (gemmbf16.go); below it they keep float32
// activations, and a BF16 tile is widened to float32 as an F16 one is.
const (
	gemmOff = iota
	gemmAVX2
	gemmAVX512
	gemmBF16
)

// gemmTile is the rows a worker converts to float32 at once (F16; F32
// rows are copied, for gemmPad) and runs every token against; gemmKC
// the columns and gemmTB the tokens (a multiple of three) of a block,
// whose sums wait in memory for the next. On one core of a Xeon with
// 48 KiB of L1 and 2 MiB of L2 (shared with other work, timed in thread
// CPU time), whole rows ran as fast as 512-column blocks of six tokens
// or faster (F16 2048×2048: 80 against 68-78 GFLOP/s; 2048×5632: 66-72
// against 65-71), and 256- or 128-column blocks slower still: the
// sums' trips to memory cost what the blocks save. So a block is a
// whole row by default; the tests run smaller ones. Nor is reading the
// rows from L2 what holds the GEMM back: a two-row × seven-token
// AVX-512 kernel (fourteen pairs, the most the bits' two zmm per pair
// allow), which reads each row's values once per seven tokens instead
// of three, over the tokens' 1024-column blocks in L1, ran at 0.89-1.03
// of the four-row × three-token kernel's speed on 2048×2048 and
// 5632×2048, and 0.82-0.97 with everything in L1: its loads per
// multiply-add (nine per fourteen against seven per twelve) cost more
// than the L2 traffic it saves.
var gemmTile, gemmKC, gemmTB = 16, 1 << 30, 3

// gemm46 selects, at AVX-512, the four-row × six-token kernel
// (gemmf46_amd64.go), whose two passes over a row keep every pair's sums
// in one zmm register instead of two, over the four-row × three-token
// one (gemmTile, which alone takes gemmKC and gemmTB). On one Zen 4 core
// (F16 and F32 2048×2048 and 5632×2048, 128 tokens, thread CPU time) it
// ran 2-14 % faster; with rows of 512 columns, 4-9 % slower (two passes'
// folds over a short row), so the tests run both.
var gemm46 = true

// gemmPad is the float32 words added to the length of each row of the
// converted tile: rows of a power-of-two length would all fall in the
// same few sets of L1 and evict each other; a 256-byte step spreads a
// block's rows over all of them. (A padded copy of the tokens too ran
// no faster, and cost an allocation per product.)
var gemmPad = 64

// FMAPeak runs rounds rounds of independent single-precision
// multiply-adds with no memory traffic on every worker of p, at the
// width the float GEMM runs (gemmLevel), and returns the rate in FLOP
// per second (a multiply-add is two) with the name of the width, or 0
// where there is no GEMM kernel. It is the compute bound a prompt, which
// is compute-bound, is measured against, as StreamSum is the memory
// bound a decode step is measured against.
func FMAPeak(p *Pool, rounds int) (flops float64, width string) {
	per, name := fmaPeakRound(gemmLevel)
	if per == 0 {
		return 0, name
	}
	w := p.Workers()
	start := time.Now()
	p.For(w, 1, func(lo, hi int) {
		for range hi - lo {
			fmaPeakRun(gemmLevel, rounds)
		}
	})
	return float64(per*rounds*w) / time.Since(start).Seconds(), name
}

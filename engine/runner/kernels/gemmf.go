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

// gemm46KC is the most 16-value steps of a half a block of mulFloat46
// runs: a row's halves split into the fewest even blocks of at most this
// many steps, so that six tokens' block (24 KiB at 64 steps) stays in L1
// while the tile's row groups stream past. gemm46Tile is the rows of a
// tile, a multiple of four.
//
// On one core of a Xeon with 48 KiB of L1 and 2 MiB of L2 (128 tokens,
// wall clock, median of 5), a 2048×5632 product (the FFN's down
// projection, whose 2816-value halves of six tokens, 66 KiB, no longer
// fit L1) ran F16 102 → 137 and F32 94 → 128 GFLOP/s with two blocks
// and tiles of 32 rows, where one block per half and 16-row tiles ran
// it before; 2048-column products ran as before (one block), 150-153
// and 140-142. With the prefetches of gemmx4x6AVX512 and mulFloat46,
// tiles of 40-48 rows ran 0-6 % faster than 32 in one run and slower in
// the next, and a 48-row tile of F32 at 5632 columns (1.1 MB) would
// not stay in a 1 MiB L2. Blocks of 24-48 steps ran 2-8 % slower than 64, and
// running each block over every token group with the rows' block held
// in L1 instead (each pair's sums waiting in L2 between blocks) ran
// 10-25 % slower: the sums' trips cost what the blocks save. Tiles of
// 64 rows ran slower, and of 16 8-15 % slower at 5632 columns: a token
// group's block is read once per four rows of a tile.
var gemm46KC, gemm46Tile = 64, 32

// gemm46Cvt has mulFloat46 convert an F16 or BF16 tile in its first
// token group's kernel calls rather than in a pass of its own; the tests
// run both.
var gemm46Cvt = true

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

package kernels

import "time"

// The float GEMM's dispatch levels (gemmLevel): MatMul of an F16 or F32
// matrix runs the zmm kernels, the ymm kernels, or the row kernels per
// token.
const (
	gemmOff = iota
	gemmAVX2
	gemmAVX512
)

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

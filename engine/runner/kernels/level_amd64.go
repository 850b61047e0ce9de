//go:build !purego

package kernels

// DispatchLevel names the widest kernels this process runs, for
// benchmark output: "avx512" (the AVX-512 row and multi-token kernels),
// "avx512-vnni" (the multi-token ones only: no GFNI or VBMI), "avx2" or
// "generic". GODEBUG=cpu.avx512f=off,cpu.avx512bw=off,cpu.avx512vl=off
// forces "avx2" on a CPU that has more.
func DispatchLevel() string {
	switch {
	case hasAVX512Rows:
		return "avx512"
	case hasAVX512:
		return "avx512-vnni"
	case hasAVX2:
		return "avx2"
	}
	return "generic"
}

//go:build !purego

package kernels

// streamSumAVX2 adds the n bytes at p (n a multiple of 256) as 64-bit
// words, prefetching near and far bytes ahead, or not at all for near 0
// (stream_amd64.s).
//
//go:noescape
func streamSumAVX2(p *byte, n, near, far int) uint64

func streamSum(b []byte, near, far int) uint64 {
	n := len(b) &^ 255
	var s uint64
	if hasAVX2 && n > 0 {
		s = streamSumAVX2(&b[0], n, near, far)
	} else {
		n = 0
	}
	return s + streamSumGeneric(b[n:])
}

//go:build !purego

package kernels

// streamSumAVX2 adds the n bytes at p (n a multiple of 256) as 64-bit
// words (stream_amd64.s).
//
//go:noescape
func streamSumAVX2(p *byte, n int) uint64

func streamSum(b []byte) uint64 {
	n := len(b) &^ 255
	var s uint64
	if hasAVX2 && n > 0 {
		s = streamSumAVX2(&b[0], n)
	} else {
		n = 0
	}
	return s + streamSumGeneric(b[n:])
}

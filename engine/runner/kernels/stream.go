package kernels

import "encoding/binary"

// StreamSum adds b as little-endian 64-bit words (wrapping; len(b) a
// multiple of 8 is read whole, a shorter tail ignored) and returns the
// sum. It is a memory bandwidth probe: where the CPU has AVX2 it reads
// with the row kernels' far prefetch, so a rate measured with it bounds
// what a decode kernel can stream, rather than being beaten by one.
func StreamSum(b []byte) uint64 {
	return streamSum(b[:len(b)&^7])
}

func streamSumGeneric(b []byte) uint64 {
	var s0, s1, s2, s3 uint64
	le := binary.LittleEndian
	i := 0
	for ; i+32 <= len(b); i += 32 {
		w := b[i : i+32 : i+32]
		s0 += le.Uint64(w[0:])
		s1 += le.Uint64(w[8:])
		s2 += le.Uint64(w[16:])
		s3 += le.Uint64(w[24:])
	}
	for ; i+8 <= len(b); i += 8 {
		s0 += le.Uint64(b[i:])
	}
	return s0 + s1 + s2 + s3
}

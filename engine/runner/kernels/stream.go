package kernels

import "encoding/binary"

// StreamSum adds b as little-endian 64-bit words (wrapping; len(b) a
// multiple of 8 is read whole, a shorter tail ignored) and returns the
// sum. It is a memory bandwidth probe: where the CPU has AVX2 it reads
// with the row kernels' far prefetch, so a rate measured with it bounds
// what a decode kernel can stream, rather than being beaten by one.
func StreamSum(b []byte) uint64 { return streamFar.Sum(b) }

// StreamProbe is StreamSum with prefetch distances of its own, in
// bytes: lines asked for Near ahead into L1 and Far ahead into L2, none
// for a zero Near (the hardware's prefetchers alone), where the CPU has
// AVX2.
type StreamProbe struct {
	Name      string
	Near, Far int
}

var streamFar = StreamProbe{"far", 2048, 8192}

// StreamProbes returns the probes a bandwidth bound takes the fastest
// of. Which one streams fastest depends on the machine: on those the row
// kernels were tuned on the far distances won, and on one core of a
// Xeon here (1 GiB streamed) far read 14.8 GB/s, near 16.3 and none 15.7.
func StreamProbes() []StreamProbe {
	return []StreamProbe{streamFar, {"near", 512, 2048}, {"none", 0, 0}}
}

// Sum is StreamSum with p's distances.
func (p StreamProbe) Sum(b []byte) uint64 {
	return streamSum(b[:len(b)&^7], p.Near, p.Far)
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

package kernels

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"meshd/engine/runner/gguf"
)

// The decode benchmarks stream weights from memory as a decode step
// does: each product reads a different copy of the matrix from an arena
// larger than any cache, so the figures are weights read per second from
// DRAM, comparable with the memory bandwidth the same run measures. (A
// server's last-level cache reaches hundreds of MiB: 480 on one Xeon
// here, which a 512 MiB arena hardly exceeded.)

const arenaBytes = 1 << 30

// newArena returns arenaBytes of memory written through, so that every
// page is the arena's own: a fresh allocation's untouched pages all map
// the kernel's one zero page, which a read loop finds in L1, and the
// bandwidth it measures is the cache's (51 GB/s on one core of a machine
// whose memory streams 15).
func newArena(r *rand.Rand) []byte {
	arena := make([]byte, arenaBytes)
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&arena[0])), len(arena)/8)
	for i := range words {
		words[i] = r.Uint64()
	}
	return arena
}

// benchArena fills arena with copies of enc (rowBytes·rows bytes each)
// and returns the matrices over them.
func benchArena(b *testing.B, arena []byte, typ gguf.TensorType, rows, cols int, enc []byte) []*Matrix {
	var ms []*Matrix
	for off := 0; off+len(enc) <= len(arena); off += len(enc) {
		copy(arena[off:], enc)
		m, err := NewMatrix(typ, rows, cols, arena[off:off+len(enc)])
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// sumWords reads buf with eight independent accumulators: the
// bandwidth baseline, the cheapest loop that reads every byte.
func sumWords(buf []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for i := 0; i+8 <= len(buf); i += 8 {
		w := (*[8]uint64)(buf[i:])
		s0 += w[0]
		s1 += w[1]
		s2 += w[2]
		s3 += w[3]
		s4 += w[4]
		s5 += w[5]
		s6 += w[6]
		s7 += w[7]
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// timeIt runs f at least once and for at least 60 ms, returning the
// seconds per call.
func timeIt(f func()) float64 {
	start := time.Now()
	n := 0
	for n == 0 || time.Since(start) < 60*time.Millisecond {
		f()
		n++
	}
	return time.Since(start).Seconds() / float64(n)
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkDecodeBandwidth measures, per type and decode-shaped matrix
// (2048×2048 and 5632×2048), the GB/s of weights a MatVec reads from
// memory, and its ratio to the machine's memory bandwidth measured on
// the same pool over the same arena: the fastest of a parallel sum, a
// parallel copy into cache-resident buffers (the runtime's memmove) and
// a parallel sum by each of StreamProbes (prefetching far, near or not),
// counting bytes read. Cases run interleaved,
// five repetitions, medians reported; the table goes to the log and each
// ratio to a metric named <type>-<rows>/bw.
func BenchmarkDecodeBandwidth(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	p := NewPool(workers)
	defer p.Close()
	r := rand.New(rand.NewPCG(41, 42))
	arena := newArena(r)
	// The sum reads the arena itself, whatever its copies hold now.
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&arena[0])), len(arena)/8)
	type bcase struct {
		name       string
		typ        gguf.TensorType
		rows, cols int
		enc        []byte
		x          []float32
		secs       []float64
	}
	var cases []*bcase
	for _, sh := range [][2]int{{2048, 2048}, {5632, 2048}} {
		for _, typ := range allTypes {
			w := randVec(r, sh[0]*sh[1], 0.02)
			enc, err := gguf.Encode(typ, w)
			if err != nil {
				b.Fatal(err)
			}
			cases = append(cases, &bcase{name: fmt.Sprintf("%s-%d", typ, sh[0]), typ: typ, rows: sh[0], cols: sh[1], enc: enc, x: randVec(r, sh[1], 1)})
		}
	}
	var bw []float64
	sums := make([]uint64, workers)
	sinks := make([][]byte, workers)
	for w := range sinks {
		sinks[w] = make([]byte, 64<<10)
	}
	const reps = 5
	b.ResetTimer()
	for rep := 0; rep < reps; rep++ {
		// Baseline: every worker sums its share of the arena.
		secs := timeIt(func() {
			chunk := len(words) / workers
			p.For(workers, 1, func(lo, hi int) {
				for w := lo; w < hi; w++ {
					sums[w] += sumWords(words[w*chunk : (w+1)*chunk])
				}
			})
		})
		copySecs := timeIt(func() {
			chunk := len(arena) / workers
			p.For(workers, 1, func(lo, hi int) {
				for w := lo; w < hi; w++ {
					src := arena[w*chunk : (w+1)*chunk]
					for off := 0; off < len(src); off += len(sinks[w]) {
						copy(sinks[w], src[off:])
					}
				}
			})
		})
		// And with the prefetching probes, which a plain loop's hardware
		// prefetch alone can fall well short of (or beat: which wins
		// depends on the machine).
		best := min(secs, copySecs)
		for _, probe := range StreamProbes() {
			best = min(best, timeIt(func() {
				chunk := len(arena) / workers
				p.For(workers, 1, func(lo, hi int) {
					for w := lo; w < hi; w++ {
						sums[w] += probe.Sum(arena[w*chunk : (w+1)*chunk])
					}
				})
			}))
		}
		bw = append(bw, float64(len(words)*8)/best/1e9)
		for _, c := range cases {
			ms := benchArena(b, arena, c.typ, c.rows, c.cols, c.enc)
			out := make([]float32, c.rows)
			qx := ms[0].NewActivation()
			var bytes int
			for _, m := range ms {
				bytes += m.Bytes()
			}
			secs := timeIt(func() {
				for _, m := range ms {
					if qx != nil {
						qx.Quantize(c.x)
					}
					MatVec(p, m, out, c.x, qx)
				}
			})
			c.secs = append(c.secs, float64(bytes)/secs/1e9)
		}
	}
	b.StopTimer()
	base := median(bw)
	var tab strings.Builder
	fmt.Fprintf(&tab, "\nmemory bandwidth (fastest of a parallel sum, copy and stream probes, %d goroutines): %.2f GB/s\n", workers, base)
	fmt.Fprintf(&tab, "%-12s %8s %8s\n", "type-rows", "GB/s", "ratio")
	for _, c := range cases {
		gbs := median(c.secs)
		fmt.Fprintf(&tab, "%-12s %8.2f %8.3f\n", c.name, gbs, gbs/base)
		b.ReportMetric(gbs/base, c.name+"/bw")
	}
	b.ReportMetric(base, "GB/s-baseline")
	b.Log(tab.String())
}

// BenchmarkMatMulPrompt compares a 128-token MatMul with MatVecs, on
// 2048×2048 matrices streamed from an arena larger than the caches (as a
// prompt and a decode step each read the model): the ratio is prompt
// tokens per second (time per matrix per token in MatMul) over decode
// tokens per second (time per matrix in MatVec), activation
// quantisation included in both. Decode and prompt timings alternate,
// five repetitions, medians.
func BenchmarkMatMulPrompt(b *testing.B) {
	p := NewPool(runtime.GOMAXPROCS(0))
	defer p.Close()
	r := rand.New(rand.NewPCG(43, 44))
	arena := newArena(r)
	const T, rows, cols = 128, 2048, 2048
	x := randVec(r, T*cols, 1)
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n%s kernels\n%-6s %12s %12s %8s\n", DispatchLevel(), "type", "decode tok/s", "prompt tok/s", "ratio")
	for _, typ := range []gguf.TensorType{gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		enc, err := gguf.Encode(typ, randVec(r, rows*cols, 0.02))
		if err != nil {
			b.Fatal(err)
		}
		ms := benchArena(b, arena, typ, rows, cols, enc)
		qs := make([]*QVec, T)
		if ms[0].Quantized() {
			for t := range qs {
				qs[t] = ms[0].NewActivation()
			}
		} else {
			qs = nil
		}
		out := make([]float32, T*rows)
		var dec, pro []float64
		for rep := 0; rep < 5; rep++ {
			dec = append(dec, timeIt(func() {
				for t := 0; t < len(ms); t++ {
					m := ms[t]
					xt := x[(t%T)*cols : (t%T+1)*cols]
					var q *QVec
					if qs != nil {
						q = qs[0]
						q.Quantize(xt)
					}
					MatVec(p, m, out[:rows], xt, q)
				}
			})/float64(len(ms)))
			pro = append(pro, timeIt(func() {
				for _, m := range ms {
					if qs != nil {
						for t := range qs {
							qs[t].Quantize(x[t*cols : (t+1)*cols])
						}
					}
					MatMul(p, m, out, x, T, qs)
				}
			})/float64(len(ms)*T))
		}
		d, pr := median(dec), median(pro)
		fmt.Fprintf(&tab, "%-6s %12.0f %12.0f %8.2f\n", typ, 1/d, 1/pr, d/pr)
		b.ReportMetric(d/pr, typ.String()+"-prompt/decode")
	}
	b.Log(tab.String())
}

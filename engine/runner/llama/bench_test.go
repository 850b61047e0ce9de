package llama

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
	"meshd/engine/runner/kernels"
)

// copyBuffers are two 256 MiB buffers, far beyond any cache, for
// measuring the memory-bandwidth bound a decode step (which streams
// every weight once) is compared with.
type copyBuffers struct{ src, dst []byte }

func newCopyBuffers() *copyBuffers {
	const size = 256 << 20
	c := &copyBuffers{src: make([]byte, size), dst: make([]byte, size)}
	for i := range c.src {
		c.src[i] = byte(i)
	}
	copy(c.dst, c.src) // fault the pages in
	return c
}

// bandwidth is bytes copied per second (each byte counted once, though
// it is read and written) by threads goroutines, each copying its own
// contiguous share, best of three: the best is the stricter bound on a
// machine shared with other work.
func (c *copyBuffers) bandwidth(threads int) float64 {
	best := 0.0
	share := len(c.src) / threads
	for range 3 {
		var wg sync.WaitGroup
		t := time.Now()
		for i := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(c.dst[i*share:(i+1)*share], c.src[i*share:(i+1)*share])
			}()
		}
		wg.Wait()
		best = max(best, float64(threads*share)/time.Since(t).Seconds())
	}
	return best
}

// BenchmarkDecodeSmolLM135M decodes with a synthetic model of
// SmolLM-135M's shape in Q8_0 on every core (GOMAXPROCS: set it with
// -cpu). It reports tokens/s, the weight bytes read per second, and that
// rate as a fraction of two bounds measured in the same run, before and
// after decoding (the higher of the two kept): a single-threaded copy
// (frac-of-bound) and a copy split over as many threads as decode uses
// (frac-of-mt-bound). The figures share the machine with whatever else
// runs on it and are noisy.
func BenchmarkDecodeSmolLM135M(b *testing.B) {
	var buf bytes.Buffer
	if err := gguf.Synth(&buf, gguf.SmolLM135M, 1); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	m, err := Load(f)
	if err != nil {
		b.Fatal(err)
	}
	pool := kernels.NewPool(0)
	defer pool.Close()
	const nCtx = 256
	st, err := m.NewState(nCtx, pool)
	if err != nil {
		b.Fatal(err)
	}
	cb := newCopyBuffers()
	bw1, bwN := cb.bandwidth(1), cb.bandwidth(pool.Workers())
	st.Eval(1) // warm up
	tok := 1
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		if len(st.Tokens()) >= nCtx {
			st.Truncate(1)
		}
		logits, err := st.Eval(tok)
		if err != nil {
			b.Fatal(err)
		}
		tok = Argmax(logits)
		n++
	}
	el := time.Since(start).Seconds()
	b.StopTimer()
	bw1, bwN = max(bw1, cb.bandwidth(1)), max(bwN, cb.bandwidth(pool.Workers()))
	wb := float64(m.WeightBytesPerToken())
	tps := float64(n) / el
	b.ReportMetric(tps, "tok/s")
	b.ReportMetric(tps*wb/1e9, "weight-GB/s")
	b.ReportMetric(bw1/1e9, "copy-GB/s")
	b.ReportMetric(bwN/1e9, "copy-mt-GB/s")
	b.ReportMetric(tps*wb/bw1, "frac-of-bound")
	b.ReportMetric(tps*wb/bwN, "frac-of-mt-bound")
	b.ReportMetric(float64(pool.Workers()), "threads")
}

// readBandwidth is bytes read per second by threads goroutines summing
// their own contiguous share of a buffer far larger than the caches, best
// of two: the machine's peak read rate. On a machine shared with other
// work the best of two short reads is higher than what a longer run
// averages, so PromptVsDecode divides by weightStream's rate instead and
// reports this one beside it.
func readBandwidth(buf []uint64, threads int) float64 {
	best := 0.0
	share := len(buf) / threads
	sums := make([]uint64, threads)
	for range 2 {
		var wg sync.WaitGroup
		t := time.Now()
		for i := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				part := buf[i*share : (i+1)*share]
				var s0, s1, s2, s3 uint64
				for j := 0; j+4 <= len(part); j += 4 {
					s0 += part[j]
					s1 += part[j+1]
					s2 += part[j+2]
					s3 += part[j+3]
				}
				sums[i] = s0 ^ s1 ^ s2 ^ s3
			}()
		}
		wg.Wait()
		best = max(best, float64(threads*share*8)/time.Since(t).Seconds())
	}
	return best
}

func median(x []float64) float64 {
	y := append([]float64(nil), x...)
	sort.Float64s(y)
	if len(y)%2 == 1 {
		return y[len(y)/2]
	}
	return (y[len(y)/2-1] + y[len(y)/2]) / 2
}

// benchShape is a dim-2048, 8-layer model of TinyLlama's proportions.
var benchShape = gguf.Shape{Layers: 8, Dim: 2048, Heads: 32, KVHeads: 4, FF: 5632, Vocab: 32000, Ctx: 512}

// lazyQ8 returns benchModel's Q8_0 source: the Q8_0 bench model's file,
// synthesised on the first call only.
func lazyQ8(b *testing.B) func() *gguf.File {
	var q8 *gguf.File
	return func() *gguf.File {
		if q8 == nil {
			s := benchShape
			s.Type = gguf.Q8_0
			q8 = synthFile(b, s, 1)
		}
		return q8
	}
}

// benchModel builds the benchmark model in type typ: gguf.Synth where it
// writes the type, else the Q8_0 model re-encoded with gguf.Encode. The
// reason is returned instead when the type cannot be built or run.
func benchModel(b *testing.B, typ gguf.TensorType, q8 func() *gguf.File) (*Model, string) {
	probe := make([]float32, 256)
	if _, err := kernels.NewMatrix(typ, 1, 256, make([]byte, typ.RowBytes(256))); err != nil {
		return nil, fmt.Sprintf("kernels: %v", err)
	}
	if _, err := gguf.Encode(typ, probe); err != nil {
		return nil, fmt.Sprintf("gguf: %v", err)
	}
	s := benchShape
	s.Type = typ
	var f *gguf.File
	if s.Validate() == nil {
		f = synthFile(b, s, 1)
	} else {
		f = rewrite(b, q8(), variant{retype: true, typ: typ}, 1)
	}
	m, err := Load(f)
	if err != nil {
		return nil, fmt.Sprintf("load: %v", err)
	}
	return m, ""
}

// weightStream reads a model's weights as a decode step does, for the
// bandwidth bound a decode step is compared with: every byte of the
// matrices once, in order, in 64 KiB pieces handed out by the same pool
// (so the same goroutines, the same dynamic split and the same dispatch),
// doing nothing else with them.
type weightStream struct {
	pieces [][]byte
	bytes  int64
	mode   int // readSum, readCopy, or readStream + k for probes[k]
	probes []kernels.StreamProbe
	sums   []uint64
}

// The ways a weightStream reads: summing words in Go, memmove into a
// cache-resident buffer, and each of kernels.StreamProbes (sums that
// prefetch far ahead, near or not at all: the first two can fall short
// of them, and which of them is fastest depends on the machine).
const (
	readSum = iota
	readCopy
	readStream
)

func newWeightStream(m *Model) *weightStream {
	ws := &weightStream{probes: kernels.StreamProbes()}
	for _, mt := range m.matrices() {
		d := mt.Data
		for off := 0; off < len(d); off += 64 << 10 {
			ws.pieces = append(ws.pieces, d[off:min(off+64<<10, len(d))])
		}
		ws.bytes += int64(len(d))
	}
	ws.sums = make([]uint64, len(ws.pieces))
	return ws
}

// modes is how many ways ws reads.
func (ws *weightStream) modes() int { return readStream + len(ws.probes) }

// Range reads pieces [lo, hi).
func (ws *weightStream) Range(lo, hi int) {
	var sink [64 << 10]byte
	for i := lo; i < hi; i++ {
		switch {
		case ws.mode == readCopy:
			copy(sink[:], ws.pieces[i])
			ws.sums[i] = uint64(sink[i&1023])
		case ws.mode >= readStream:
			ws.sums[i] = ws.probes[ws.mode-readStream].Sum(ws.pieces[i])
		default:
			ws.sums[i] = sumBytes(ws.pieces[i])
		}
	}
}

// sumBytes adds b as little-endian words with eight independent sums:
// about the cheapest loop that reads every byte.
func sumBytes(b []byte) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	le := binary.LittleEndian
	for ; len(b) >= 64; b = b[64:] {
		w := (*[64]byte)(b)
		s0 += le.Uint64(w[0:])
		s1 += le.Uint64(w[8:])
		s2 += le.Uint64(w[16:])
		s3 += le.Uint64(w[24:])
		s4 += le.Uint64(w[32:])
		s5 += le.Uint64(w[40:])
		s6 += le.Uint64(w[48:])
		s7 += le.Uint64(w[56:])
	}
	for _, c := range b {
		s0 += uint64(c)
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}

// pass reads every weight once on the pool and returns the seconds taken.
func (ws *weightStream) pass(pool *kernels.Pool, mode int) float64 {
	ws.mode = mode
	t := time.Now()
	pool.Run(len(ws.pieces), 1, ws)
	return time.Since(t).Seconds()
}

// promptFLOPs is the FLOP per token of an n-token prompt: two per
// weight of every layer matrix, and of the output projection once per
// prompt (only the last token's logits are computed); attention is left
// out (a few percent at 128 tokens).
func promptFLOPs(m *Model, n int) float64 {
	var w float64
	for _, l := range m.layers {
		for _, mt := range []*kernels.Matrix{l.q, l.k, l.v, l.o, l.gate, l.up, l.down} {
			w += float64(mt.Rows) * float64(mt.Cols)
		}
	}
	w += float64(m.output.Rows) * float64(m.output.Cols) / float64(n)
	return 2 * w
}

// BenchmarkPromptVsDecode measures, per weight type that kernels and gguf
// handle at run time (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K,
// Q6_K; others are skipped with a note), on a synthetic dim-2048 8-layer model with every
// core (-cpu sets them): decode tok/s, the decode rate's fraction of the
// bandwidth bound, prompt tok/s for a 128-token batched prompt,
// prompt ÷ decode tok/s, and prompt/bound: prompt tok/s over the bound's
// decode tok/s (how many times the bandwidth bound a batched prompt
// runs). The header names the kernels' dispatch level
// (kernels.DispatchLevel; GODEBUG=cpu.avx512f=off,cpu.avx512bw=off,
// cpu.avx512vl=off forces AVX2 on a CPU that has AVX-512).
//
// The bound is the rate at which the same pool reads the same weights
// with no arithmetic (weightStream: the fastest of summing them, copying
// them into a cache-resident buffer and each of kernels.StreamProbes), measured in
// passes interleaved with the decode steps, one before each, so that
// both see the same share of a machine other work also runs on, and both
// are averaged the same way (total bytes over total time of the rep):
// frac-of-bound is WeightBytesPerToken · decode tok/s ÷ that rate, per
// repetition. peak-GB/s is the best of two short reads of a 512 MiB
// buffer (readBandwidth), a higher figure on a loaded machine, and
// frac-of-peak the decode rate's fraction of it. Each iteration runs
// five repetitions of all of these, interleaved; the reported figures
// are medians over repetitions.
func BenchmarkPromptVsDecode(b *testing.B) {
	const promptN, decodeN = 128, 16
	buf := make([]uint64, (512<<20)/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	q8File := lazyQ8(b)
	var table []string
	var fmaWidth string
	for _, typ := range []gguf.TensorType{gguf.F32, gguf.F16, gguf.BF16, gguf.Q8_0, gguf.Q4_0, gguf.Q4_1, gguf.Q5_0, gguf.Q5_1, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K} {
		b.Run(typ.String(), func(b *testing.B) {
			m, why := benchModel(b, typ, q8File)
			if m == nil {
				table = append(table, fmt.Sprintf("%-5s skipped: %s", typ, why))
				b.Skipf("%s skipped: %s", typ, why)
			}
			pool := kernels.NewPool(0)
			defer pool.Close()
			st, err := m.NewState(promptN+decodeN+1, pool)
			if err != nil {
				b.Fatal(err)
			}
			ws := newWeightStream(m)
			prompt := testPrompt(promptN, m.Vocab)
			ctx := context.Background()
			if _, err := st.EvalBatch(ctx, prompt[:8]); err != nil { // warm up
				b.Fatal(err)
			}
			wb := float64(m.WeightBytesPerToken())
			fl := promptFLOPs(m, promptN)
			var dec, pr, ratio, bw, frac, peak, fracPeak, fma, fracFMA []float64
			// Each b.Loop iteration runs reps interleaved repetitions, so
			// the medians have several samples even when the bench time
			// allows one iteration (make bench's 1 s).
			const reps = 5
			for b.Loop() {
				for range reps {
					peak = append(peak, readBandwidth(buf, pool.Workers()))

					st.Truncate(0)
					logits, err := st.EvalBatch(ctx, prompt[:4])
					if err != nil {
						b.Fatal(err)
					}
					var decSecs float64
					modes := ws.modes()
					modeSecs := make([]float64, modes)
					modePasses := make([]int, modes)
					for i := range decodeN {
						modeSecs[i%modes] += ws.pass(pool, i%modes)
						modePasses[i%modes]++
						t := time.Now()
						if logits, err = st.Eval(Argmax(logits)); err != nil {
							b.Fatal(err)
						}
						decSecs += time.Since(t).Seconds()
					}
					d := decodeN / decSecs
					var w float64 // the fastest way of reading them
					for k := range modes {
						w = max(w, float64(ws.bytes)*float64(modePasses[k])/modeSecs[k])
					}
					dec, bw = append(dec, d), append(bw, w)
					frac = append(frac, d*wb/w)
					fracPeak = append(fracPeak, d*wb/peak[len(peak)-1])

					f, width := kernels.FMAPeak(pool, 1<<16)
					fma, fmaWidth = append(fma, f), width
					st.Truncate(0)
					t := time.Now()
					if _, err := st.EvalBatch(ctx, prompt); err != nil {
						b.Fatal(err)
					}
					pr = append(pr, promptN/time.Since(t).Seconds())
					if f > 0 {
						fracFMA = append(fracFMA, pr[len(pr)-1]*fl/f)
					}
					ratio = append(ratio, pr[len(pr)-1]/dec[len(dec)-1])
				}
			}
			d, p, r, w, f := median(dec), median(pr), median(ratio), median(bw), median(frac)
			pk, fp := median(peak), median(fracPeak)
			var ff float64
			if len(fracFMA) > 0 {
				ff = median(fracFMA)
			}
			b.ReportMetric(d, "decode-tok/s")
			b.ReportMetric(w/wb, "bound-tok/s")
			b.ReportMetric(f, "frac-of-bound")
			b.ReportMetric(p, "prompt-tok/s")
			b.ReportMetric(r, "prompt/decode")
			b.ReportMetric(p*wb/w, "prompt/bound")
			b.ReportMetric(w/1e9, "read-GB/s")
			b.ReportMetric(pk/1e9, "peak-GB/s")
			b.ReportMetric(fp, "frac-of-peak")
			b.ReportMetric(float64(len(dec)), "reps")
			b.ReportMetric(p*fl/1e9, "prompt-GFLOP/s")
			b.ReportMetric(ff, "prompt-frac-of-fma")
			table = append(table, fmt.Sprintf("%-5s %8.0f MB %8.2f %8.2f %6.2f %6.2f %9.2f %8.2f %7.2f %6.1f %6.1f %3d %8.1f %6.3f", typ,
				wb/1e6, d, w/wb, f, fp, p, r, p*wb/w, w/1e9, pk/1e9, len(dec), p*fl/1e9, ff))
		})
	}
	// Printed: the log of a benchmark that has sub-benchmarks is not.
	fmt.Printf("medians over interleaved repetitions, %d-token prompt, %d decode steps, %d threads, %s kernels; "+
		"p-GFLOP/s: the prompt's multiply-adds (two FLOP each) per second, f-fma: its fraction of the same run's %s float multiply-add peak (kernels.FMAPeak)\n"+
		"type  bytes/token decode/s  bound/s  frac  f-peak prompt/s  p/d-ratio p/bound GB/s  peak reps p-GFLOP/s  f-fma\n%s\n",
		promptN, decodeN, runtime.GOMAXPROCS(0), kernels.DispatchLevel(), fmaWidth, strings.Join(table, "\n"))
}

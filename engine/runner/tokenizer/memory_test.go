package tokenizer

import (
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/engine/runner/gguf"
)

// largeText is n bytes (a little more, to end on a whole piece) of text
// drawn from the corpus: words, numbers, scripts, runs of spaces and
// newlines, in a seeded order so that every run sees the same text.
func largeText(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	for b.Len() < n {
		s := corpus[rng.IntN(len(corpus))]
		switch rng.IntN(4) {
		case 0:
			b.WriteString(strings.Repeat(" ", rng.IntN(40)))
		case 1:
			b.WriteString(strings.Repeat("\n", rng.IntN(3)))
		}
		b.WriteString(s)
	}
	return b.String()
}

// memTokenizers are the vocabularies the memory tests run over: a
// 32 000-token SentencePiece vocabulary as gguf.Synth writes it, and
// byte-level BPE vocabularies learnt from the corpus under the
// pre-tokenizers with the most stages and the most backtracking.
func memTokenizers(t testing.TB) map[string]*Tokenizer {
	toks, scores, types := gguf.SynthVocab(32000)
	spm, err := New("llama", toks, scores, types, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Tokenizer{"spm-32000": spm}
	tokens, merges := byteLevelVocab(t, corpus, 400)
	for _, pre := range []string{"llama3", "default", "deepseek-llm", "qwen2"} {
		tk, err := New("gpt2", tokens, nil, nil, merges)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.SetPreTokenizer(pre); err != nil {
			t.Fatal(err)
		}
		out["bpe-"+pre] = tk
	}
	return out
}

// allocPerByte is what one Encode of text allocates, in bytes and in
// allocations per input byte. The counts are the runtime's own, so they
// are the same from run to run (only a GC cycle's bookkeeping varies,
// and that by far less than the bounds below).
func allocPerByte(tk *Tokenizer, text string, parseSpecial bool) (bytesPer, allocsPer float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids := tk.Encode(text, true, parseSpecial)
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ids)
	n := float64(len(text))
	return float64(after.TotalAlloc-before.TotalAlloc) / n, float64(after.Mallocs-before.Mallocs) / n
}

// Encoding allocates a bounded amount per input byte, whatever the
// text's length: the result (one int per token, grown by appending, which
// for a large slice costs about five times its final size: 28 B per input
// byte on the SentencePiece vocabulary, which gives 0.7 tokens per byte)
// and buffers the size of a window. On a 2 MB text that is far below what
// the whole-text encoders allocated (runes, symbols, a queue entry and a
// string or two per byte, closures per regex step: hundreds of bytes and
// several allocations per input byte, gigabytes for the 7 MB a request
// may carry).
func TestEncodeAllocationBounded(t *testing.T) {
	text := largeText(2<<20, 7)
	const maxBytes, maxAllocs = 40, 0.05
	for name, tk := range memTokenizers(t) {
		for _, ps := range []bool{false, true} {
			b, a := allocPerByte(tk, text, ps)
			t.Logf("%s parse_special=%v: %.2f B and %.4f allocations per input byte", name, ps, b, a)
			if b > maxBytes || a > maxAllocs {
				t.Errorf("%s parse_special=%v: %.2f B and %.4f allocations per input byte, want ≤ %d and ≤ %g",
					name, ps, b, a, maxBytes, maxAllocs)
			}
		}
	}
}

// The memory an Encode allocates does not grow with the text faster
// than the text: four times the text allocates about four times as much
// (within a quarter), where a quadratic step would show as sixteen.
func TestEncodeAllocationLinear(t *testing.T) {
	for _, c := range []struct{ small, large string }{
		{largeText(256<<10, 3), largeText(1<<20, 3)},
		// One word: BPE merges it whole.
		{strings.Repeat("ab", 128<<10), strings.Repeat("ab", 512<<10)},
	} {
		for name, tk := range memTokenizers(t) {
			bs, _ := allocPerByte(tk, c.small, true)
			bl, _ := allocPerByte(tk, c.large, true)
			if bl > 1.25*bs+1 {
				t.Errorf("%s: %.2f B per input byte at %d bytes, %.2f at %d", name, bl, len(c.large), bs, len(c.small))
			}
		}
	}
}

// Encoding in windows gives the tokens of the whole-text encoders, also
// with windows so small that every cut falls inside a word, a run of
// spaces or a multi-byte character.
func TestStreamingMatchesWholeText(t *testing.T) {
	// The whole-text BPE merges a word in quadratic time: keep the long
	// word short enough for it.
	texts := append(slices.Clone(corpus), largeText(16<<10, 11), strings.Repeat(" ", 3000)+"x", strings.Repeat("ab", 600))
	for name, tk := range memTokenizers(t) {
		for ti, text := range texts {
			for _, chunk := range []int{1, 7, 64, 1 << 20} {
				var got, want []int
				if tk.Model == "llama" {
					want = tk.refEncodeSPM(nil, text, true)
					got = tk.encodeSPMChunked(nil, text, true, chunk, nil)
				} else {
					want = tk.refEncodeBPE(nil, text)
					got = tk.encodeBPEChunked(nil, text, chunk, nil)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s text %d (%d bytes) chunk %d: %d tokens, whole text %d; first difference at %d",
						name, ti, len(text), chunk, len(got), len(want), firstDiff(got, want))
				}
			}
		}
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// BenchmarkEncodeLarge tokenizes a 4 MB text and reports, besides the
// time, input MB/s, allocated bytes per input byte, and the time as a
// ratio to strings.Fields over the same text in the same run (a plain
// scan that also allocates a result per word): the median of
// interleaved repetitions, so a busy machine moves both alike.
func BenchmarkEncodeLarge(b *testing.B) {
	text := largeText(4<<20, 5)
	tks := memTokenizers(b)
	names := make([]string, 0, len(tks))
	for n := range tks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		tk := tks[name]
		b.Run(name, func(b *testing.B) {
			var enc, base []time.Duration
			var words int
			for range b.N {
				t0 := time.Now()
				words += len(strings.Fields(text))
				t1 := time.Now()
				ids := tk.Encode(text, true, true)
				t2 := time.Now()
				base, enc = append(base, t1.Sub(t0)), append(enc, t2.Sub(t1))
				runtime.KeepAlive(ids)
			}
			slices.Sort(enc)
			slices.Sort(base)
			me, mb := enc[len(enc)/2], base[len(base)/2]
			bp, _ := allocPerByte(tk, text, true)
			b.ReportMetric(float64(len(text))/me.Seconds()/1e6, "MB/s")
			b.ReportMetric(bp, "allocB/inbyte")
			b.ReportMetric(float64(me)/float64(mb), "x-fields")
			_ = words
		})
	}
}

// EncodeFunc hands over Encode's tokens, in order, in batches, and holds
// no more than a batch of them: what it allocates does not grow with
// the number of tokens.
func TestEncodeFuncMatchesEncode(t *testing.T) {
	text := largeText(256<<10, 9)
	for name, tk := range memTokenizers(t) {
		for _, ps := range []bool{false, true} {
			want := tk.Encode(text, true, ps)
			var got []int
			batches := 0
			tk.EncodeFunc(text, true, ps, func(ids []int) { got = append(got, ids...); batches++ })
			if !reflect.DeepEqual(got, want) || batches < 2 {
				t.Fatalf("%s parse_special=%v: %d tokens in %d batches, Encode %d", name, ps, len(got), batches, len(want))
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			n := 0
			tk.EncodeFunc(text, true, ps, func(ids []int) { n += len(ids) })
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
				t.Errorf("%s: EncodeFunc of %d bytes (%d tokens) allocated %d bytes, want ≤ 1 MiB", name, len(text), n, alloc)
			}
		}
	}
}

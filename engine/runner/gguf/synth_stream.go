package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// SynthStream writes a model of shape s as Synth does (the same metadata,
// vocabulary, tensor names, types and directory), but draws each
// quantised matrix directly as random blocks of its type, with scales
// that give its values the standard deviation Synth's N(0, 1/fan_in)
// has and a mean of zero, and streams them a megabyte at a time. Nothing
// is quantised, and memory stays at a buffer whatever the model's size:
// a 7B-class file takes seconds where Synth would take hours (and half a
// gigabyte per tensor). The weights are not Synth's for the same seed;
// what they are good for is what loading, memory and speed see.
//
// Quantised matrices must be Q4_K, Q6_K or Q8_0 (what the Q4_K_M mixture
// gives when every row is whole super-blocks, and Q8_0); float matrices
// F32.
func SynthStream(w io.Writer, s Shape, seed uint64) error {
	if err := s.Validate(); err != nil {
		return err
	}
	var gw Writer
	synthMeta(&gw, s, seed)
	d, ff := uint64(s.Dim), uint64(s.FF)
	kvw := uint64(s.Dim / s.Heads * s.KVHeads)
	var err error
	// Each tensor has its own stream, so the file does not depend on the
	// order the writer asks for them.
	n := uint64(0)
	matrix := func(name string, layer int, in, out uint64, std float64) {
		n++
		if err != nil {
			return
		}
		kind := name[:len(name)-len(".weight")]
		for i := len(kind) - 1; i >= 0; i-- {
			if kind[i] == '.' {
				kind = kind[i+1:]
				break
			}
		}
		t := s.TypeOf(kind, layer, int(in))
		switch t {
		case Q4_K, Q6_K, Q8_0, F32:
		default:
			err = fmt.Errorf("gguf: SynthStream writes Q4_K, Q6_K, Q8_0 and F32 matrices, not %s (%s)", t, name)
			return
		}
		rng := rand.New(rand.NewPCG(seed, n))
		gw.AddTensorStream(name, t, []uint64{in, out}, func(w io.Writer) error {
			return streamBlocks(w, t, in*out, float32(std), rng)
		})
	}
	norm := func(name string) {
		n++
		rng := rand.New(rand.NewPCG(seed, n))
		gw.AddTensorStream(name, F32, []uint64{d}, func(w io.Writer) error {
			b := make([]byte, 4*d)
			for i := range d {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(1+0.1*rng.NormFloat64())))
			}
			_, err := w.Write(b)
			return err
		})
	}
	matrix("token_embd.weight", 0, d, uint64(s.Vocab), 1)
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		norm(p + "attn_norm.weight")
		matrix(p+"attn_q.weight", l, d, d, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_k.weight", l, d, kvw, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_v.weight", l, d, kvw, 1/math.Sqrt(float64(d)))
		matrix(p+"attn_output.weight", l, d, d, 1/math.Sqrt(float64(d)))
		norm(p + "ffn_norm.weight")
		matrix(p+"ffn_gate.weight", l, d, ff, 1/math.Sqrt(float64(d)))
		matrix(p+"ffn_down.weight", l, ff, d, 1/math.Sqrt(float64(ff)))
		matrix(p+"ffn_up.weight", l, d, ff, 1/math.Sqrt(float64(d)))
	}
	norm("output_norm.weight")
	if s.SeparateOutput {
		matrix("output.weight", 0, d, uint64(s.Vocab), 1/math.Sqrt(float64(d)))
	}
	if err != nil {
		return err
	}
	_, err = gw.WriteTo(w)
	return err
}

// streamBlocks writes n values of type t drawn as random codes under
// fixed scales: uniform codes have a known mean and variance, so the
// scale is std over the codes' standard deviation and the minimum (for
// Q4_K) cancels the mean.
func streamBlocks(w io.Writer, t TensorType, n uint64, std float32, rng *rand.Rand) error {
	bs, bb := t.BlockSize(), t.BlockBytes()
	blocks := n / bs
	per := max(1, (1<<20)/bb)
	buf := make([]byte, per*bb)
	fill := func(b []byte) {
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		for i := len(b) &^ 7; i < len(b); i++ {
			b[i] = byte(rng.Uint32())
		}
	}
	for done := uint64(0); done < blocks; {
		k := min(per, blocks-done)
		b := buf[:k*bb]
		switch t {
		case F32:
			for i := uint64(0); i < k; i++ {
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rng.NormFloat64())*std))
			}
		case Q8_0:
			// d, then 32 codes uniform in [-128, 127]: sd 73.9.
			fill(b)
			h := F32ToF16(std / 73.9)
			for i := uint64(0); i < k; i++ {
				binary.LittleEndian.PutUint16(b[i*bb:], h)
			}
		case Q4_K:
			// d, dmin, 12 bytes of 6-bit scales and mins (all 15, so
			// the high bits are zero), 128 bytes of codes uniform in
			// [0, 15] (mean 7.5, sd 4.61): value = d·15·q − dmin·15.
			fill(b)
			dd := std / (15 * 4.61)
			hd, hm := F32ToF16(dd), F32ToF16(dd*7.5)
			for i := uint64(0); i < k; i++ {
				blk := b[i*bb : (i+1)*bb]
				binary.LittleEndian.PutUint16(blk[0:], hd)
				binary.LittleEndian.PutUint16(blk[2:], hm)
				for j := 4; j < 12; j++ {
					blk[j] = 15
				}
				for j := 12; j < 16; j++ {
					blk[j] = 0xFF
				}
			}
		case Q6_K:
			// 128 bytes of low and 64 of high code bits (codes uniform in
			// [0, 63], value d·scale·(q−32): mean −0.5, sd 18.5), 16
			// int8 scales (all 16), then d.
			fill(b)
			dd := F32ToF16(std / (16 * 18.5))
			for i := uint64(0); i < k; i++ {
				blk := b[i*bb : (i+1)*bb]
				for j := 192; j < 208; j++ {
					blk[j] = 16
				}
				binary.LittleEndian.PutUint16(blk[208:], dd)
			}
		default:
			return fmt.Errorf("gguf: no random blocks for %s", t)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		done += k
	}
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	"meshd/cmd/internal/cli"
	"meshd/engine/runner/gguf"
)

// cmdModel synthesises and inspects GGUF models.
func cmdModel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: meshctl model synth -o FILE [flags] | meshctl model info FILE")
		return fmt.Errorf("%w: model needs synth or info", errUsage)
	}
	if cli.IsHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: meshctl model synth -o FILE [flags] | meshctl model info FILE   (meshctl model synth -h: its flags)")
		return nil
	}
	switch args[0] {
	case "synth":
		return modelSynth(args[1:], stdout, stderr)
	case "info":
		return modelInfo(args[1:], stdout, stderr)
	}
	return fmt.Errorf("%w: unknown model subcommand %q", errUsage, args[0])
}

// bertShapes are the named shapes of real embedding models model synth
// writes as BERT encoders; every other model is llama-architecture.
var bertShapes = map[string]gguf.BERTShape{
	"e5-small-v2":       gguf.E5SmallV2,
	"bge-small-en-v1.5": gguf.BGESmallENv15,
	"all-minilm-l6-v2":  gguf.AllMiniLML6v2,
}

func modelSynth(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("model synth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := gguf.SmolLM135M
	out := fs.String("o", "", "output file")
	shape := fs.String("shape", "smollm-135m", "model shape: smollm-135m (llama) or a BERT embedding model: e5-small-v2, bge-small-en-v1.5, all-minilm-l6-v2 (f16 unless -type; -layers, -dim, -heads, -ff, -vocab, -ctx override)")
	layers := fs.Int("layers", def.Layers, "transformer blocks")
	dim := fs.Int("dim", def.Dim, "embedding length")
	heads := fs.Int("heads", def.Heads, "attention heads")
	kvHeads := fs.Int("kv-heads", def.KVHeads, "key/value heads")
	ff := fs.Int("ff", def.FF, "feed-forward length")
	vocab := fs.Int("vocab", def.Vocab, "vocabulary size (≥ 260)")
	nCtx := fs.Int("ctx", def.Ctx, "training context length")
	typ := fs.String("type", "q8_0", "matrix type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, or a llama.cpp mixture: q4_k_m, q5_k_m")
	seed := fs.Uint64("seed", 1, "weight seed")
	untied := fs.Bool("separate-output", false, "write output.weight instead of tying it to token_embd")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	if *out == "" {
		return fmt.Errorf("%w: -o FILE is required", errUsage)
	}
	if b, ok := bertShapes[*shape]; ok {
		return synthBERT(fs, b, *out, *seed, stdout)
	}
	if *shape != "smollm-135m" {
		return fmt.Errorf("%w: unknown shape %q", errUsage, *shape)
	}
	tt, mix, err := gguf.ParseQuant(*typ)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	s := gguf.Shape{Layers: *layers, Dim: *dim, Heads: *heads, KVHeads: *kvHeads, FF: *ff, Vocab: *vocab, Ctx: *nCtx, Type: tt, Mix: mix, SeparateOutput: *untied}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	fh, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	if err := gguf.Synth(fh, s, *seed); err != nil {
		fh.Close()
		os.Remove(*out)
		return fmt.Errorf("model synth: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	label := s.Type.String()
	if mix != gguf.MixNone {
		label = mix.String()
	}
	fmt.Fprintf(stdout, "wrote %s: llama %d layers, dim %d, %d/%d heads, ff %d, vocab %d, %s, %.1fM params\n",
		*out, s.Layers, s.Dim, s.Heads, s.KVHeads, s.FF, s.Vocab, label, float64(s.Params())/1e6)
	return nil
}

// synthBERT writes a named BERT shape, with the sizes and type given
// explicitly on the command line replacing the shape's.
func synthBERT(fs *flag.FlagSet, s gguf.BERTShape, out string, seed uint64, stdout io.Writer) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		n, _ := strconv.Atoi(f.Value.String())
		switch f.Name {
		case "layers":
			s.Layers = n
		case "dim":
			s.Dim = n
		case "heads":
			s.Heads = n
		case "ff":
			s.FF = n
		case "vocab":
			s.Vocab = n
		case "ctx":
			s.Ctx = n
		case "type":
			if s.Type, err = gguf.ParseTensorType(f.Value.String()); err != nil {
				err = fmt.Errorf("%w: %v", errUsage, err)
			}
		case "kv-heads", "separate-output":
			err = fmt.Errorf("%w: -%s does not apply to a BERT shape", errUsage, f.Name)
		}
	})
	if err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	fh, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	if err := gguf.SynthBERT(fh, s, seed); err != nil {
		fh.Close()
		os.Remove(out)
		return fmt.Errorf("model synth: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	pooling := map[uint32]string{0: "none", 1: "mean", 2: "cls", 3: "last"}[s.Pooling]
	fmt.Fprintf(stdout, "wrote %s: bert %d layers, dim %d, %d heads, ff %d, vocab %d, ctx %d, pooling %s, %s, %.1fM params\n",
		out, s.Layers, s.Dim, s.Heads, s.FF, s.Vocab, s.Ctx, pooling, s.Type, float64(s.Params())/1e6)
	return nil
}

func modelInfo(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: model info FILE", errUsage)
	}
	f, err := gguf.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(stdout, "file:       %s (%d bytes)\n", args[0], f.Size())
	fmt.Fprintf(stdout, "version:    %d\nalignment:  %d\ndata:       offset %d\n", f.Version, f.Alignment, f.DataOffset)
	fmt.Fprintf(stdout, "metadata:   %d keys\n", len(f.KV))
	for _, kv := range f.KV {
		fmt.Fprintf(stdout, "  %-42s %s\n", kv.Key, describe(kv.Value))
	}
	var total, params uint64
	byType := map[gguf.TensorType]int{}
	for _, ti := range f.Tensors {
		total += ti.Bytes()
		params += ti.Elements()
		byType[ti.Type]++
	}
	fmt.Fprintf(stdout, "tensors:    %d, %.1fM elements, %d bytes\n", len(f.Tensors), float64(params)/1e6, total)
	var types []gguf.TensorType
	for t := range byType {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return types[i] < types[j] })
	for _, t := range types {
		fmt.Fprintf(stdout, "  %-6s %d tensors\n", t, byType[t])
	}
	for _, ti := range f.Tensors {
		fmt.Fprintf(stdout, "  %-32s %-5s %v @%d\n", ti.Name, ti.Type, ti.Dims, ti.Offset)
	}
	return nil
}

func describe(v any) string {
	switch x := v.(type) {
	case gguf.Array:
		s := fmt.Sprintf("[%s × %d]", x.Elem, x.Len())
		if strs, ok := x.Values.([]string); ok && len(strs) > 0 {
			n := min(len(strs), 5)
			s += fmt.Sprintf(" %q…", strs[:n])
		}
		return s
	case string:
		if len(x) > 60 {
			return fmt.Sprintf("%q…", x[:60])
		}
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("%v (%T)", v, v)
}

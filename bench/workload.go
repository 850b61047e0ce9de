package bench

// The benchmark workload: what Run serves, read from a
// TOML file with strict decoding (an unknown or misspelt key is an error,
// not a silently ignored setting), and the deterministic prompts it sends.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"lukechampine.com/blake3"

	"meshd/engine/runner/gguf"
	"meshd/wire"
)

// Workload is a benchmark's definition. Its JSON form (defaults filled in,
// the recipe resolved) is the report's workload section.
type Workload struct {
	// Name labels the report; Description is free text.
	Name        string `toml:"name" json:"name"`
	Description string `toml:"description,omitempty" json:"description,omitempty"`
	// Model says which model the receipts must name.
	Model WorkloadModel `toml:"model" json:"model"`
	// Request is what every serve asks for.
	Request WorkloadRequest `toml:"request" json:"request"`
	// Matrix is prompt lengths × output lengths × repetitions.
	Matrix WorkloadMatrix `toml:"matrix" json:"matrix"`
	// Idle is the idle baseline measured before and after the serves.
	Idle WorkloadIdle `toml:"idle" json:"idle"`
	// Trace is the power trace recorded for the plots (display data).
	Trace WorkloadTrace `toml:"trace" json:"trace"`
}

// WorkloadModel names the model: exactly one of Recipe, GGUF, Synthetic or
// ReferenceWork. Every receipt of the run must carry the recipe it
// resolves to; the backend is chosen by the daemon's router from the
// request's fidelity floor, and Backend, when set, must be the one chosen.
type WorkloadModel struct {
	Backend       string          `toml:"backend,omitempty" json:"backend,omitempty"`
	Recipe        string          `toml:"recipe,omitempty" json:"recipe,omitempty"`
	GGUF          string          `toml:"gguf,omitempty" json:"gguf,omitempty"`
	Synthetic     *SyntheticModel `toml:"synthetic,omitempty" json:"synthetic,omitempty"`
	ReferenceWork int             `toml:"reference_work,omitempty" json:"reference_work,omitempty"`
	// Resolved is the recipe the receipts must name, computed from the
	// above when the workload is loaded (not read from the TOML).
	Resolved string `toml:"-" json:"resolved_recipe"`
}

// SyntheticModel is a synthesised llama-architecture GGUF (meshctl model
// synth): its recipe is the content id of the file those parameters
// write. Path, when set, is where the file is written if absent, so a
// daemon's config can serve it.
type SyntheticModel struct {
	Layers  int    `toml:"layers" json:"layers"`
	Dim     int    `toml:"dim" json:"dim"`
	Heads   int    `toml:"heads" json:"heads"`
	KVHeads int    `toml:"kv_heads" json:"kv_heads"`
	FF      int    `toml:"ff" json:"ff"`
	Vocab   int    `toml:"vocab" json:"vocab"`
	Ctx     int    `toml:"ctx" json:"ctx"`
	Type    string `toml:"type" json:"type"`
	Seed    uint64 `toml:"seed" json:"seed"`
	Path    string `toml:"path,omitempty" json:"path,omitempty"`
}

// WorkloadRequest is the mesh/1 request fields every serve carries.
type WorkloadRequest struct {
	FidelityFloor  int    `toml:"fidelity_floor" json:"fidelity_floor"`
	JouleCeilingUJ uint64 `toml:"joule_ceiling_uj" json:"joule_ceiling_uj"`
}

// WorkloadMatrix is the serves: every prompt length (in words) with every
// output length (max_tokens), Repetitions times, after Warmup serves that
// are sealed and enclosed but not summarised.
type WorkloadMatrix struct {
	PromptWords  []int `toml:"prompt_words" json:"prompt_words"`
	OutputTokens []int `toml:"output_tokens" json:"output_tokens"`
	Repetitions  int   `toml:"repetitions" json:"repetitions"`
	Warmup       int   `toml:"warmup" json:"warmup"`
	// Concurrency is how many serves are in flight at once; 1 (the
	// default) gives one metered serve per span, so no figure is shared.
	Concurrency int `toml:"concurrency" json:"concurrency"`
}

// WorkloadIdle is the idle baseline: seconds of idle window before the
// measured serves and after them (0: none).
type WorkloadIdle struct {
	BeforeSeconds float64 `toml:"before_seconds" json:"before_seconds"`
	AfterSeconds  float64 `toml:"after_seconds" json:"after_seconds"`
}

// WorkloadTrace is the power trace: sampled from GET /v1/live every
// IntervalMs (50..10000, default 200).
type WorkloadTrace struct {
	IntervalMs int `toml:"interval_ms" json:"interval_ms"`
}

// Cell is one (prompt length in words, output length in max_tokens) pair
// of the matrix.
type Cell struct{ Prompt, Output int }

// String names the cell prompt×output, as "4×8".
func (c Cell) String() string { return fmt.Sprintf("%d×%d", c.Prompt, c.Output) }

// Limits that keep a typo from asking for a week of serves.
const (
	maxMatrixSide   = 64
	maxRepetitions  = 10000
	maxPromptWords  = 32768
	maxOutputTokens = 1 << 20
)

// LoadWorkload reads and checks a workload file and resolves its recipe.
func LoadWorkload(path string) (*Workload, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	w, err := ParseWorkload(data)
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", path, err)
	}
	return w, nil
}

// ParseWorkload decodes a workload strictly, fills defaults, checks every
// field and resolves the recipe.
func ParseWorkload(data []byte) (*Workload, error) {
	w := &Workload{}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(w); err != nil {
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			return nil, fmt.Errorf("unknown key: %s", strings.TrimSpace(sm.String()))
		}
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return nil, fmt.Errorf("line %d column %d: %v", row, col, de)
		}
		return nil, err
	}
	if w.Matrix.Concurrency == 0 {
		w.Matrix.Concurrency = 1
	}
	if w.Trace.IntervalMs == 0 {
		w.Trace.IntervalMs = 200
	}
	if err := w.Check(); err != nil {
		return nil, err
	}
	r, err := w.Model.resolve()
	if err != nil {
		return nil, err
	}
	w.Model.Resolved = r
	return w, nil
}

// Check names the first field outside its domain.
func (w *Workload) Check() error {
	m := w.Matrix
	switch {
	case w.Name == "":
		return errors.New("name: required (it labels the report)")
	case w.Request.FidelityFloor < 0 || w.Request.FidelityFloor > 4:
		return fmt.Errorf("request.fidelity_floor: %d is outside 0..4 (F0..F4)", w.Request.FidelityFloor)
	case w.Request.JouleCeilingUJ == 0:
		return errors.New("request.joule_ceiling_uj: required and > 0 (a zero ceiling admits nothing)")
	case len(m.PromptWords) == 0 || len(m.PromptWords) > maxMatrixSide:
		return fmt.Errorf("matrix.prompt_words: want 1..%d lengths", maxMatrixSide)
	case len(m.OutputTokens) == 0 || len(m.OutputTokens) > maxMatrixSide:
		return fmt.Errorf("matrix.output_tokens: want 1..%d lengths", maxMatrixSide)
	case m.Repetitions < 1 || m.Repetitions > maxRepetitions:
		return fmt.Errorf("matrix.repetitions: %d, want 1..%d", m.Repetitions, maxRepetitions)
	case m.Warmup < 0 || m.Warmup > maxRepetitions:
		return fmt.Errorf("matrix.warmup: %d, want 0..%d", m.Warmup, maxRepetitions)
	case m.Concurrency < 1 || m.Concurrency > 256:
		return fmt.Errorf("matrix.concurrency: %d, want 1..256", m.Concurrency)
	case w.Idle.BeforeSeconds < 0 || w.Idle.BeforeSeconds > 600 || w.Idle.AfterSeconds < 0 || w.Idle.AfterSeconds > 600:
		return errors.New("idle: before_seconds and after_seconds must be 0..600 (the daemon's limit)")
	case w.Trace.IntervalMs < 50 || w.Trace.IntervalMs > 10000:
		return fmt.Errorf("trace.interval_ms: %d, want 50..10000", w.Trace.IntervalMs)
	}
	seen := map[int]bool{}
	for _, p := range m.PromptWords {
		if p < 1 || p > maxPromptWords || seen[p] {
			return fmt.Errorf("matrix.prompt_words: %d is a repeat or outside 1..%d", p, maxPromptWords)
		}
		seen[p] = true
	}
	seen = map[int]bool{}
	for _, o := range m.OutputTokens {
		if o < 1 || o > maxOutputTokens || seen[o] {
			return fmt.Errorf("matrix.output_tokens: %d is a repeat or outside 1..%d", o, maxOutputTokens)
		}
		seen[o] = true
	}
	return nil
}

// Cells is the matrix in the order serves cycle through it.
func (w *Workload) Cells() []Cell {
	var out []Cell
	for _, p := range w.Matrix.PromptWords {
		for _, o := range w.Matrix.OutputTokens {
			out = append(out, Cell{p, o})
		}
	}
	return out
}

// resolve computes the recipe the receipts must name.
func (m *WorkloadModel) resolve() (string, error) {
	n := 0
	for _, set := range []bool{m.Recipe != "", m.GGUF != "", m.Synthetic != nil, m.ReferenceWork != 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return "", errors.New("model: set exactly one of recipe, gguf, synthetic or reference_work")
	}
	switch {
	case m.Recipe != "":
		return m.Recipe, nil
	case m.ReferenceWork != 0:
		if m.ReferenceWork < 0 {
			return "", fmt.Errorf("model.reference_work: %d, want > 0", m.ReferenceWork)
		}
		// PROFILE §10: the reference engine's recipe.
		return "reference/v1:work=" + strconv.Itoa(m.ReferenceWork), nil
	case m.GGUF != "":
		f, err := os.Open(m.GGUF)
		if err != nil {
			return "", fmt.Errorf("model.gguf: %w", err)
		}
		defer f.Close()
		h := blake3.New(32, nil)
		if _, err := io.Copy(h, f); err != nil {
			return "", fmt.Errorf("model.gguf: hashing %s: %w", m.GGUF, err)
		}
		var id wire.ContentID
		h.Sum(id[:0])
		return "gguf:" + id.String(), nil
	}
	return m.Synthetic.recipe()
}

// recipe synthesises the model into a hash (and into Path when that file
// is absent) and names it as PROFILE §11 does.
func (s *SyntheticModel) recipe() (string, error) {
	tt, mix, err := gguf.ParseQuant(s.Type)
	if err != nil {
		return "", fmt.Errorf("model.synthetic.type: %w", err)
	}
	shape := gguf.Shape{Layers: s.Layers, Dim: s.Dim, Heads: s.Heads, KVHeads: s.KVHeads, FF: s.FF, Vocab: s.Vocab, Ctx: s.Ctx, Type: tt, Mix: mix}
	if err := shape.Validate(); err != nil {
		return "", fmt.Errorf("model.synthetic: %w", err)
	}
	h := blake3.New(32, nil)
	var out io.Writer = h
	var file *os.File
	if s.Path != "" {
		if _, err := os.Stat(s.Path); errors.Is(err, os.ErrNotExist) {
			if file, err = os.OpenFile(s.Path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644); err != nil {
				return "", fmt.Errorf("model.synthetic.path: %w", err)
			}
			out = io.MultiWriter(h, file)
		}
	}
	err = gguf.Synth(out, shape, s.Seed)
	if file != nil {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(s.Path+".tmp", s.Path)
		}
	}
	if err != nil {
		return "", fmt.Errorf("model.synthetic: synthesising: %w", err)
	}
	var id wire.ContentID
	h.Sum(id[:0])
	if s.Path != "" && file == nil {
		// The file was there already: it must be this model, or the
		// daemon serving it would seal another recipe.
		got, err := (&WorkloadModel{GGUF: s.Path}).resolve()
		if err != nil {
			return "", err
		}
		if got != "gguf:"+id.String() {
			return "", fmt.Errorf("model.synthetic.path: %s exists but is not the model these parameters synthesise (%s, want gguf:%s)", s.Path, got, id)
		}
	}
	return "gguf:" + id.String(), nil
}

// benchWords are the words prompts are made of: common English, so a real
// tokenizer sees ordinary text and the reference engine counts one token
// per word (PROFILE §10).
var benchWords = strings.Fields(`the of and to in is was it for on with as at by this from
	energy power board token model joule meter window serve chain receipt sealed
	measure bound idle trace report signed steward battery shunt current voltage
	sample period rail span edge cloud river mountain garden window paper letter
	number answer question reason simple small large quick slow bright quiet`)

// benchPrompt is the prompt of one serve: words chosen by BLAKE3 from the
// serve's coordinates, so verify can rebuild it and check the receipt's
// request_id, and no two repetitions send the same text.
func benchPrompt(words, output, rep int, warmup bool) string {
	seed := fmt.Sprintf("meshd-bench/v1 prompt=%d output=%d rep=%d warmup=%t", words, output, rep, warmup)
	var buf []byte
	if words <= 64 {
		// BLAKE3's output is one stream of which every length is a
		// prefix: its first 64 bytes are Sum512's, without the hasher
		// and reader verify would otherwise build for each serve.
		sum := blake3.Sum512([]byte(seed))
		buf = sum[:words]
	} else {
		x := blake3.New(32, nil)
		x.Write([]byte(seed))
		buf = make([]byte, words)
		io.ReadFull(x.XOF(), buf)
	}
	var b strings.Builder
	b.Grow(8 * words)
	for i, v := range buf {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(benchWords[int(v)%len(benchWords)])
	}
	return b.String()
}

// benchRequestID is the request_id the daemon derives for a bench serve
// (PROFILE §3, §16: prompt_tokens defaults to the prompt's bytes plus one,
// which the harness leaves to the daemon).
func benchRequestID(w *Workload, s *Serve) (string, error) {
	prompt := benchPrompt(s.PromptWords, s.MaxTokens, s.Rep, s.Warmup)
	fl, err := wire.FidelityFromUint(uint64(w.Request.FidelityFloor))
	if err != nil {
		return "", err
	}
	id, err := wire.ServeRequest{PromptHash: wire.ContentOf([]byte(prompt)), PromptTokens: uint32(len(prompt) + 1),
		MaxTokens: uint32(s.MaxTokens), FidelityFloor: fl, JouleCeilingUJ: w.Request.JouleCeilingUJ}.ID()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

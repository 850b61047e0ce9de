package subprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"meshd/wire"
)

// completionRequest is the body of POST /completion.
type completionRequest struct {
	Prompt       string  `json:"prompt"`
	NPredict     uint32  `json:"n_predict"`
	CachePrompt  bool    `json:"cache_prompt"`
	Temperature  float64 `json:"temperature"`
	Seed         uint32  `json:"seed"`
	ReturnTokens bool    `json:"return_tokens"`
	Stream       bool    `json:"stream,omitempty"`
	// Stop is passed as llama-server's "stop": the child cuts its output
	// before the first stop word (and holds back a streamed tail that may
	// start one).
	Stop []string `json:"stop,omitempty"`
}

// stoppedByWord says whether a /completion answer (or a stream's final
// event) ended on a stop word: stop_type "word", as llama-server and
// mesh-gguf report it.
func stoppedByWord(body []byte) bool {
	var r struct {
		StopType stopType `json:"stop_type"`
	}
	return json.Unmarshal(body, &r) == nil && r.StopType.word()
}

// stopType is a response's stop_type, decoded with the rest of it so that
// the answer is read once. It never fails the decode: a stop_type that is
// not a string (at any of its occurrences) is no stop word, as it was when
// stop_type was decoded on its own and such a value failed that decode.
type stopType struct {
	v   string
	bad bool
}

func (s *stopType) UnmarshalJSON(b []byte) error {
	switch {
	case string(b) == "null":
	case string(b) == `"word"`:
		s.v = "word"
	case len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s.v) == nil:
	default:
		s.bad = true
	}
	return nil
}

func (s stopType) word() bool { return !s.bad && s.v == "word" }

// decodeOne decodes body, which must hold exactly one JSON value, into v.
// Most answers are well formed: json.Unmarshal reads them in place, where
// a Decoder would first copy them into buffers it grows. Anything it
// refuses is decoded again, into a fresh value, the way a Decoder does, so
// that the errors (and what counts as trailing data) are the Decoder's.
func decodeOne[T any](body []byte, v *T) (malformed, trailing error) {
	if json.Unmarshal(body, v) == nil {
		return nil, nil
	}
	*v = *new(T)
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err, nil
	}
	if dec.More() {
		return nil, errTrailing
	}
	// Unmarshal refused what a Decoder takes: a value followed by a
	// closing bracket or brace, which More does not count as data.
	return nil, nil
}

var errTrailing = errors.New("trailing data after the JSON object")

// count is an optional JSON integer. It is decoded from json.Number so that
// a negative, fractional or huge value is caught rather than wrapped.
type count struct {
	set bool
	v   int64
}

func (c *count) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		return fmt.Errorf("want an integer, got the string %s", b)
	}
	// b is one JSON value the decoder has checked: a number literal
	// starts with a digit or a minus sign, and is then exactly the text
	// json.Number would hold. Anything else is not a number.
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return fmt.Errorf("want an integer, got %s", b)
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	c.set, c.v = true, v
	return nil
}

type completionTimings struct {
	CacheN         count `json:"cache_n"`
	PromptN        count `json:"prompt_n"`
	PredictedN     count `json:"predicted_n"`
	DraftN         count `json:"draft_n"`
	DraftNAccepted count `json:"draft_n_accepted"`
}

type completionResponse struct {
	Content         *string            `json:"content"`
	Tokens          *[]json.Number     `json:"tokens"`
	TokensPredicted count              `json:"tokens_predicted"`
	TokensEvaluated count              `json:"tokens_evaluated"`
	Truncated       bool               `json:"truncated"`
	Timings         *completionTimings `json:"timings"`
	StopType        stopType           `json:"stop_type"`
}

// ErrBadResponse is wrapped when the engine's answer cannot be turned into
// an honest ServeOutcome.
var ErrBadResponse = errors.New("engine response rejected")

// parseCompletion maps a /completion response to the §5 counters (see the
// package doc for the mapping and the checks). draftModel says whether the
// recipe the child runs has a draft model: then every serve is speculative,
// whether or not the engine reported its draft counters.
func parseCompletion(body []byte, nPredict uint32, draftModel bool) (wire.ServeOutcome, string, error) {
	o, content, _, err := parseCompletionStop(body, nPredict, draftModel)
	return o, content, err
}

// parseCompletionStop is parseCompletion that also says whether a stop
// word ended the completion (stoppedByWord), from the same one decode.
func parseCompletionStop(body []byte, nPredict uint32, draftModel bool) (wire.ServeOutcome, string, bool, error) {
	var r completionResponse
	if bad, trailing := decodeOne(body, &r); bad != nil {
		return wire.ServeOutcome{}, "", false, fmt.Errorf("%w: malformed JSON: %v", ErrBadResponse, bad)
	} else if trailing != nil {
		return wire.ServeOutcome{}, "", false, fmt.Errorf("%w: %v", ErrBadResponse, trailing)
	}
	fail := func(format string, a ...any) (wire.ServeOutcome, string, bool, error) {
		return wire.ServeOutcome{}, "", false, fmt.Errorf("%w: "+format, append([]any{ErrBadResponse}, a...)...)
	}
	if r.Content == nil {
		return fail("content is missing")
	}
	if !r.TokensPredicted.set {
		return fail("tokens_predicted is missing")
	}
	if !r.TokensEvaluated.set {
		return fail("tokens_evaluated is missing")
	}
	if r.Truncated {
		return fail("the engine truncated the prompt to fit its context, so it did not serve the prompt the request names")
	}
	var t completionTimings
	if r.Timings != nil {
		t = *r.Timings
	}
	u32 := func(name string, c count) (uint32, error) {
		if !c.set {
			return 0, nil
		}
		if c.v < 0 || c.v > math.MaxUint32 {
			return 0, fmt.Errorf("%w: %s = %d is out of range", ErrBadResponse, name, c.v)
		}
		return uint32(c.v), nil
	}
	var o wire.ServeOutcome
	var cacheN, promptN, predictedN uint32
	var err error
	for _, f := range []struct {
		name string
		c    count
		dst  *uint32
	}{
		{"tokens_evaluated", r.TokensEvaluated, &o.TokensIn},
		{"tokens_predicted", r.TokensPredicted, &o.TokensOut},
		{"timings.cache_n", t.CacheN, &cacheN},
		{"timings.prompt_n", t.PromptN, &promptN},
		{"timings.predicted_n", t.PredictedN, &predictedN},
		{"timings.draft_n", t.DraftN, &o.SpecProposed},
		{"timings.draft_n_accepted", t.DraftNAccepted, &o.SpecAccepted},
	} {
		if *f.dst, err = u32(f.name, f.c); err != nil {
			return wire.ServeOutcome{}, "", false, err
		}
	}
	if o.TokensOut > nPredict {
		return fail("tokens_predicted %d exceeds n_predict %d", o.TokensOut, nPredict)
	}
	if t.PredictedN.set && predictedN != o.TokensOut {
		return fail("timings.predicted_n %d disagrees with tokens_predicted %d", predictedN, o.TokensOut)
	}
	// Builds that ignore return_tokens send an empty list; a list that is
	// there must match.
	if r.Tokens != nil && len(*r.Tokens) > 0 && len(*r.Tokens) != int(o.TokensOut) {
		return fail("%d tokens returned but tokens_predicted is %d", len(*r.Tokens), o.TokensOut)
	}
	if cacheN > o.TokensIn {
		return fail("timings.cache_n %d exceeds tokens_evaluated %d", cacheN, o.TokensIn)
	}
	if promptN > o.TokensIn {
		return fail("timings.prompt_n %d exceeds tokens_evaluated %d", promptN, o.TokensIn)
	}
	// The reused and the evaluated part of the prompt are disjoint: a
	// response whose two parts add up to more than the prompt counts some
	// token twice, and its cache figure cannot be trusted.
	if t.CacheN.set && t.PromptN.set && uint64(cacheN)+uint64(promptN) > uint64(o.TokensIn) {
		return fail("timings.cache_n %d plus timings.prompt_n %d exceeds tokens_evaluated %d", cacheN, promptN, o.TokensIn)
	}
	// §5's prefix cache (PROFILE §12): cache_hit_tokens is the prompt
	// tokens whose keys and values the engine reused from its KV cache
	// instead of evaluating them, timings.cache_n. An engine that does not
	// report it claims no hits (absent: 0); prompt_n alone is not turned
	// into one, since the engine did not say what it skipped.
	o.CacheHitTokens = cacheN
	if o.SpecAccepted > o.SpecProposed {
		return fail("timings.draft_n_accepted %d exceeds draft_n %d", o.SpecAccepted, o.SpecProposed)
	}
	if o.SpecAccepted > o.TokensOut {
		return fail("timings.draft_n_accepted %d exceeds the %d tokens delivered", o.SpecAccepted, o.TokensOut)
	}
	// §5: greedy decode accepts every token it delivers; speculative decode
	// accepts the draft tokens the target model kept. A draft model in the
	// recipe makes the serve speculative even when the engine reports no
	// draft counters (llama-server omits them when nothing was drafted):
	// then the absent count is 0, which claims no accepted tokens rather
	// than crediting the draft with the target's own samples.
	if draftModel || o.SpecProposed > 0 {
		o.TokensAccepted = o.SpecAccepted
	} else {
		o.TokensAccepted = o.TokensOut
	}
	if err := o.Validate(); err != nil {
		return fail("%v", err)
	}
	return o, *r.Content, r.StopType.word(), nil
}

// engineError extracts the message of llama-server's error envelope
// {"error":{"code","message","type"}}, or a prefix of the body.
func engineError(body []byte) string {
	var e struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != nil && e.Error.Message != "" {
		if e.Error.Type != "" {
			return e.Error.Type + ": " + e.Error.Message
		}
		return e.Error.Message
	}
	const max = 200
	if len(body) > max {
		return fmt.Sprintf("%q…", body[:max])
	}
	return fmt.Sprintf("%q", body)
}

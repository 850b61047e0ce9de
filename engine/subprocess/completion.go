package subprocess

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"

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
		StopType string `json:"stop_type"`
	}
	return json.Unmarshal(body, &r) == nil && r.StopType == "word"
}

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
	var n json.Number
	if len(b) > 0 && b[0] == '"' {
		return fmt.Errorf("want an integer, got the string %s", b)
	}
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("want an integer, got %s", b)
	}
	v, err := n.Int64()
	if err != nil {
		return fmt.Errorf("want an integer, got %s", n)
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
}

// ErrBadResponse is wrapped when the engine's answer cannot be turned into
// an honest ServeOutcome.
var ErrBadResponse = errors.New("engine response rejected")

// parseCompletion maps a /completion response to the §5 counters (see the
// package doc for the mapping and the checks). draftModel says whether the
// recipe the child runs has a draft model: then every serve is speculative,
// whether or not the engine reported its draft counters.
func parseCompletion(body []byte, nPredict uint32, draftModel bool) (wire.ServeOutcome, string, error) {
	var r completionResponse
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		return wire.ServeOutcome{}, "", fmt.Errorf("%w: malformed JSON: %v", ErrBadResponse, err)
	}
	if dec.More() {
		return wire.ServeOutcome{}, "", fmt.Errorf("%w: trailing data after the JSON object", ErrBadResponse)
	}
	fail := func(format string, a ...any) (wire.ServeOutcome, string, error) {
		return wire.ServeOutcome{}, "", fmt.Errorf("%w: "+format, append([]any{ErrBadResponse}, a...)...)
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
			return wire.ServeOutcome{}, "", err
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
	return o, *r.Content, nil
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

package subprocess

import (
	"errors"
	"strings"
	"testing"

	"meshd/wire"
)

// TestParseCompletionAcceptedAndCacheHits pins the §5 sentences for
// tokens_accepted and cache_hit_tokens on llama-server responses, with and
// without a draft model in the recipe (PROFILE §12: cache_hit_tokens is
// timings.cache_n).
func TestParseCompletionAcceptedAndCacheHits(t *testing.T) {
	tests := []struct {
		name   string
		draft  bool // the recipe has a draft model
		body   string
		want   wire.ServeOutcome
		errHas string // non-empty: the response must be refused
	}{
		{
			name:  "speculative with a draft model",
			draft: true,
			body: `{"content":"abcdefghijkl","tokens_predicted":12,"tokens_evaluated":5,
				"timings":{"predicted_n":12,"draft_n":10,"draft_n_accepted":7}}`,
			want: wire.ServeOutcome{TokensIn: 5, TokensOut: 12, TokensAccepted: 7, SpecProposed: 10, SpecAccepted: 7},
		},
		{
			// e.g. n-gram speculation, which needs no draft model
			name: "speculative reported without a draft model",
			body: `{"content":"abcdefghijkl","tokens_predicted":12,"tokens_evaluated":5,
				"timings":{"draft_n":10,"draft_n_accepted":7}}`,
			want: wire.ServeOutcome{TokensIn: 5, TokensOut: 12, TokensAccepted: 7, SpecProposed: 10, SpecAccepted: 7},
		},
		{
			name: "speculative with nothing accepted",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"draft_n":6,"draft_n_accepted":0}}`,
			want: wire.ServeOutcome{TokensIn: 5, TokensOut: 4, TokensAccepted: 0, SpecProposed: 6},
		},
		{
			name: "greedy without draft counters",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"predicted_n":4}}`,
			want: wire.ServeOutcome{TokensIn: 5, TokensOut: 4, TokensAccepted: 4},
		},
		{
			name: "greedy with draft counters at zero",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"draft_n":0,"draft_n_accepted":0}}`,
			want: wire.ServeOutcome{TokensIn: 5, TokensOut: 4, TokensAccepted: 4},
		},
		{
			// Conservative: the engine attested no accepted drafts, so
			// none are claimed and the receipt carries no wedge figure.
			name:  "draft model but no draft counters",
			draft: true,
			body:  `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"predicted_n":4}}`,
			want:  wire.ServeOutcome{TokensIn: 5, TokensOut: 4, TokensAccepted: 0},
		},
		{
			name:  "draft model with draft_n but no draft_n_accepted",
			draft: true,
			body:  `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"draft_n":6}}`,
			want:  wire.ServeOutcome{TokensIn: 5, TokensOut: 4, TokensAccepted: 0, SpecProposed: 6},
		},
		{
			// A repeated chat prompt on llama-server: all but the last of
			// its 47 tokens came from the slot's KV cache.
			name: "prompt reuse reported as cache_n is the cache hit",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":47,"tokens_cached":50,
				"timings":{"cache_n":46,"prompt_n":1,"predicted_n":4}}`,
			want: wire.ServeOutcome{TokensIn: 47, TokensOut: 4, TokensAccepted: 4, CacheHitTokens: 46},
		},
		{
			name:  "prompt reuse with a draft model",
			draft: true,
			body: `{"content":"abcdefgh","tokens_predicted":8,"tokens_evaluated":20,
				"timings":{"cache_n":12,"prompt_n":8,"predicted_n":8,"draft_n":9,"draft_n_accepted":5}}`,
			want: wire.ServeOutcome{TokensIn: 20, TokensOut: 8, TokensAccepted: 5, CacheHitTokens: 12, SpecProposed: 9, SpecAccepted: 5},
		},
		{
			// tokens_cached is what the slot holds afterwards (prompt plus
			// output), never a hit count.
			name: "tokens_cached alone is no cache hit",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":12,"tokens_cached":16,"timings":{"prompt_n":12}}`,
			want: wire.ServeOutcome{TokensIn: 12, TokensOut: 4, TokensAccepted: 4},
		},
		{
			// Without cache_n the engine did not say what it reused: no
			// hits are claimed from the gap prompt_n leaves.
			name: "prompt_n without cache_n claims no hits",
			body: `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":12,"timings":{"prompt_n":1}}`,
			want: wire.ServeOutcome{TokensIn: 12, TokensOut: 4, TokensAccepted: 4},
		},
		{
			name:   "reused and evaluated parts overlap",
			body:   `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":12,"timings":{"cache_n":11,"prompt_n":2}}`,
			errHas: "cache_n 11 plus timings.prompt_n 2 exceeds tokens_evaluated 12",
		},
		{
			name:   "accepted drafts beyond the tokens delivered",
			draft:  true,
			body:   `{"content":"abcdefgh","tokens_predicted":8,"tokens_evaluated":5,"timings":{"draft_n":10,"draft_n_accepted":9}}`,
			errHas: "draft_n_accepted 9 exceeds the 8 tokens delivered",
		},
		{
			name:   "accepted drafts beyond the proposed",
			body:   `{"content":"abcdefgh","tokens_predicted":8,"tokens_evaluated":5,"timings":{"draft_n":3,"draft_n_accepted":4}}`,
			errHas: "draft_n_accepted 4 exceeds draft_n 3",
		},
		{
			name:   "accepted drafts without proposals",
			draft:  true,
			body:   `{"content":"abcdefgh","tokens_predicted":8,"tokens_evaluated":5,"timings":{"draft_n_accepted":1}}`,
			errHas: "exceeds draft_n 0",
		},
		{
			name:   "prompt reuse beyond the prompt",
			body:   `{"content":"abcd","tokens_predicted":4,"tokens_evaluated":5,"timings":{"cache_n":6}}`,
			errHas: "cache_n 6 exceeds tokens_evaluated 5",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parseCompletion([]byte(tc.body), 16, tc.draft)
			if tc.errHas != "" {
				if !errors.Is(err, ErrBadResponse) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("parseCompletion = %+v, %v; want ErrBadResponse containing %q", o, err, tc.errHas)
				}
				if o != (wire.ServeOutcome{}) {
					t.Fatalf("refused response still mapped to %+v", o)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseCompletion: %v", err)
			}
			if o != tc.want {
				t.Fatalf("outcome = %+v, want %+v", o, tc.want)
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("mapped outcome fails wire validation: %v", err)
			}
		})
	}
}

package api

import (
	"encoding/json"
	"testing"

	"meshd/steward"
)

// TestUsageCachedTokens: usage carries the receipt's counts, its cache
// hits as prompt_tokens_details.cached_tokens, in OpenAI's shape.
func TestUsageCachedTokens(t *testing.T) {
	for _, tc := range []struct {
		rc   steward.Receipt
		want string
	}{
		{steward.Receipt{TokensIn: 206, TokensOut: 16, CacheHitTokens: 205},
			`{"completion_tokens":16,"prompt_tokens":206,"prompt_tokens_details":{"cached_tokens":205},"total_tokens":222}`},
		{steward.Receipt{TokensIn: 3, TokensOut: 2},
			`{"completion_tokens":2,"prompt_tokens":3,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":5}`},
	} {
		got, err := json.Marshal(usage(&tc.rc))
		if err != nil || string(got) != tc.want {
			t.Errorf("usage(%+v) = %s, %v; want %s", tc.rc, got, err, tc.want)
		}
	}
}

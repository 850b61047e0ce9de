package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api/apitest"
	"meshd/agent/node"
)

// Every GET that reads query parameters refuses one out of range,
// malformed, repeated or unknown with a 400 naming it; in range, the same
// routes answer 200.
func TestQueryParametersOutOfRange(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	for _, tc := range []struct {
		query string
		param string // "" : accepted
		says  string
	}{
		{"/v1/receipts?after=0&limit=1000", "", ""},
		{"/v1/receipts?from=-1", "from", "unknown query parameter"},
		{"/v1/receipts?after=-1", "after", "want an integer"},
		{"/v1/receipts?after=+1", "after", "want an integer"},
		{"/v1/receipts?after=1.5", "after", "want an integer"},
		{"/v1/receipts?after=", "after", "want an integer"},
		{"/v1/receipts?after=18446744073709551615", "after", "at most 2^64-2"},
		{"/v1/receipts?after=18446744073709551616", "after", "want an integer"},
		{"/v1/receipts?after=1&after=2", "after", "given 2 times"},
		{"/v1/receipts?limit=0", "limit", "1..1000"},
		{"/v1/receipts?limit=-5", "limit", "1..1000"},
		{"/v1/receipts?limit=1001", "limit", "1..1000"},
		{"/v1/receipts?limit=ten", "limit", "1..1000"},
		{"/v1/receipts?limit=1;x", "", "malformed"},
		{"/v1/receipts?%zz=1", "", "malformed"},
		{"/v1/receipts/0?verbose=1", "verbose", "takes no query parameters"},
		{"/v1/chain/head?after=1", "after", "takes no query parameters"},
		{"/v1/backends?limit=1", "limit", "takes no query parameters"},
		{"/v1/meters?x=1", "x", "takes no query parameters"},
		{"/v1/models?limit=1", "limit", "takes no query parameters"},
		{"/v1/rag?limit=1", "limit", "takes no query parameters"},
		{"/v1/node?x=", "x", "takes no query parameters"},
		{"/v1/chain/checkpoint?count=1", "count", "takes no query parameters"},
		{"/v1/live?interval_ms=49", "interval_ms", "50..10000"},
		{"/v1/live?interval_ms=10001", "interval_ms", "50..10000"},
		{"/v1/live?interval_ms=-200", "interval_ms", "50..10000"},
		{"/v1/live?interval=200", "interval", "takes interval_ms"},
		{"/v1/chain/head", "", ""},
		{"/v1/backends", "", ""},
		{"/v1/meters", "", ""},
		{"/v1/models", "", ""},
		{"/v1/rag", "", ""},
		{"/v1/node", "", ""},
	} {
		t.Run(tc.query, func(t *testing.T) {
			resp, err := http.Get(st.URL + tc.query)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if tc.param == "" && tc.says == "" {
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d, want 200: %s", resp.StatusCode, b)
				}
				return
			}
			var e struct {
				Error struct{ Message, Param, Code, Type string }
			}
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("status %d, body %q: %v", resp.StatusCode, b, err)
			}
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param != tc.param || e.Error.Code != "invalid_field" ||
				e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.says) ||
				(tc.param != "" && !strings.HasPrefix(e.Error.Message, tc.param+": ")) {
				t.Fatalf("status %d, error %+v; want 400 naming %q and saying %q", resp.StatusCode, e.Error, tc.param, tc.says)
			}
		})
	}
}

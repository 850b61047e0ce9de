package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
)

// The route a receipt proves is readable from the API's JSON without the
// grammar: on a serve's answer and on the chain as read back.
func TestReceiptJSONCarriesTheRoute(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	// Floor F2 passes over ref-tiny (F1): ref-mid serves. "x y" is 2 words
	// in, 8 out at 300 µJ/token: est 3000 µJ.
	resp, err := http.Post(st.URL+"/v1/serve", "application/json",
		strings.NewReader(`{"prompt":"x y","prompt_tokens":2,"max_tokens":8,"fidelity_floor":2,"joule_ceiling_uj":1000000}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var served struct {
		Receipt api.Receipt `json:"receipt"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&served); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("serve: %d %v", resp.StatusCode, err)
	}
	rr, err := http.Get(st.URL + "/v1/receipts")
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Body.Close()
	var chain struct {
		Receipts []api.Receipt `json:"receipts"`
	}
	if err := json.NewDecoder(rr.Body).Decode(&chain); err != nil || len(chain.Receipts) != 1 {
		t.Fatalf("reading the chain: %v (%d receipts)", err, len(chain.Receipts))
	}
	for _, r := range []api.Receipt{served.Receipt, chain.Receipts[0]} {
		cs := r.RouteCandidates
		if len(cs) != 2 || cs[0].Backend != "ref-tiny" || cs[0].Verdict != "below floor" || cs[0].Fidelity != "F1" ||
			cs[1].Backend != "ref-mid" || cs[1].Verdict != "admissible" || cs[1].EstTotalUJ == nil || *cs[1].EstTotalUJ != 3000 {
			t.Fatalf("route_candidates %+v", cs)
		}
		if r.Receipt["x_ceiling_uj"] != float64(1_000_000) || r.Receipt["x_route_candidates"] != "8:ref-tiny F1 400 below floor;7:ref-mid F3 3000 admissible" {
			t.Fatalf("receipt fields x_ceiling_uj %v, x_route_candidates %v", r.Receipt["x_ceiling_uj"], r.Receipt["x_route_candidates"])
		}
	}
}

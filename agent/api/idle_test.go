package api

import (
	"encoding/json"
	"testing"
	"time"

	"meshd/steward"
	"meshd/wire"
)

// A serve's receipt in the API's JSON names the idle record its idle
// figure comes from, beside the figure.
func TestReceiptJSONNamesIdleRecord(t *testing.T) {
	k, err := steward.NewKeyFromSeed(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	idle, rec := uint64(500_000), uint64(3)
	d := steward.Draft{Request: wire.ContentOf([]byte("r")), Backend: "b", Recipe: "r", Route: "why",
		Outcome: wire.ServeOutcome{TokensOut: 2, TokensAccepted: 2}, Energy: wire.Measured(5000, 4500), IdleRecord: &rec,
		Metering: wire.Metering{Meter: "ina226@i2c-1:0x40", Kind: wire.KindADC, WindowNs: 10_000_000, ServeNs: 9_500_000,
			ErrorUJ: 25, Samples: 10, MaxGapNs: 1_100_000, CoveredPPM: wire.FullPPM, PeriodNs: 1_111_000, AccuracyPPM: 5_000, Shared: 1,
			FullScaleUW: 10_000_000, IdleUW: &idle}}
	prev := wire.ContentOf([]byte("prev"))
	r, err := steward.New(k, nil, steward.Options{}).Build(d, 4, &prev, make([]byte, steward.NonceSize), time.UnixMilli(1_767_225_600_000))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(receiptOf(&steward.Sealed{Receipt: r}))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Receipt map[string]any `json:"receipt"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Receipt["x_idle_record"] != float64(3) || got.Receipt["x_idle_uw"] != float64(500_000) {
		t.Fatalf("receipt JSON: x_idle_record %v, x_idle_uw %v", got.Receipt["x_idle_record"], got.Receipt["x_idle_uw"])
	}
}

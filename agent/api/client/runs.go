package client

// Sealed records (PROFILE §22): idle windows and benchmark runs as
// receipts in the steward's chain, each with the document its request_id
// addresses.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"meshd/steward"
)

// Record is a sealed record as the daemon answers it: the envelope opened
// under the steward key and its document checked against request_id.
type Record struct {
	Sequence uint64
	Envelope []byte
	Document []byte
	Receipt  *steward.Receipt
}

type recordWire struct {
	Sequence uint64 `json:"sequence"`
	Envelope string `json:"envelope"`
	Document string `json:"document"`
}

func (c *Client) record(ctx context.Context, path string, body any, extra any) (*Record, error) {
	resp, err := c.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, fmt.Errorf("meshd: decoding %s: %w", path, err)
	}
	var w recordWire
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("meshd: decoding %s: %w", path, err)
	}
	if extra != nil {
		if err := json.Unmarshal(raw, extra); err != nil {
			return nil, fmt.Errorf("meshd: decoding %s: %w", path, err)
		}
	}
	env, err1 := base64.StdEncoding.Strict().DecodeString(w.Envelope)
	doc, err2 := base64.StdEncoding.Strict().DecodeString(w.Document)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("meshd: %s: the envelope or document is not base64", path)
	}
	k, err := c.Steward(ctx)
	if err != nil {
		return nil, err
	}
	o, err := steward.OpenEnvelope(env, k)
	if err != nil {
		return nil, fmt.Errorf("meshd: %s returned a record that does not verify: %w", path, err)
	}
	if err := steward.CheckRecordDocument(o.Receipt, doc); err != nil {
		return nil, fmt.Errorf("meshd: %s: %w", path, err)
	}
	if o.Receipt.Sequence != w.Sequence {
		return nil, fmt.Errorf("meshd: %s: answer says sequence %d, the record %d", path, w.Sequence, o.Receipt.Sequence)
	}
	return &Record{Sequence: w.Sequence, Envelope: env, Document: doc, Receipt: o.Receipt}, nil
}

// IdleRecord measures an idle window of seconds on backend's span, in run
// when run is set, and returns the sealed idle record with the reading.
func (c *Client) IdleRecord(ctx context.Context, backend string, seconds float64, run *uint64) (*Record, *IdleReading, error) {
	body := map[string]any{"backend": backend, "seconds": seconds}
	if run != nil {
		body["run"] = *run
	}
	var rd IdleReading
	rec, err := c.record(ctx, "/v1/meters/idle", body, &rd)
	if err != nil {
		return nil, nil, err
	}
	return rec, &rd, nil
}

// RunOpen is what a harness declares when it opens a run.
type RunOpen struct {
	WorkloadSHA256 string `json:"workload_sha256"`
	Repetitions    uint64 `json:"repetitions"`
	ServesDeclared uint64 `json:"serves_declared"`
	Harness        string `json:"harness"`
	Caller         string `json:"caller"`
}

// OpenRun seals a run-open record; its Sequence is the run to name on
// serves (ServeRequest's Run) and idle windows.
func (c *Client) OpenRun(ctx context.Context, o RunOpen) (*Record, error) {
	return c.record(ctx, "/v1/runs", o, nil)
}

// CloseRun seals the run's run-close; reason "" asks for complete (the
// daemon decides from what it counted).
func (c *Client) CloseRun(ctx context.Context, run uint64, reason string) (*Record, error) {
	return c.CloseRunWith(ctx, run, RunClose{Reason: reason})
}

// RunClose is what a harness may state when it closes a run.
type RunClose struct {
	// Reason says why the run stopped early; "" asks for complete.
	Reason string
	// TraceSHA256 (64 lower-case hex) is the harness's digest of what it
	// recorded beside the run, sealed in the run-close as its
	// declaration; "" declares none.
	TraceSHA256 string
}

// CloseRunWith seals the run's run-close with everything rc states.
func (c *Client) CloseRunWith(ctx context.Context, run uint64, rc RunClose) (*Record, error) {
	body := map[string]any{}
	if rc.Reason != "" {
		body["reason"] = rc.Reason
	}
	if rc.TraceSHA256 != "" {
		body["trace_sha256"] = rc.TraceSHA256
	}
	return c.record(ctx, "/v1/runs/"+strconv.FormatUint(run, 10)+"/close", body, nil)
}

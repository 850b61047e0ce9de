package client

// What a benchmark harness asks of the daemon (PROFILE §16, agent/api
// bench.go): the node's inventory, an idle window, a checkpoint that
// anchors a run, readiness, and
// the live stream of power readings and receipts.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"meshd/steward"
)

// NodeInfo is GET /v1/node: who the daemon is, the board it runs on, what
// it measures with and what it serves.
type NodeInfo struct {
	Steward string `json:"steward"`
	Version string `json:"version"`
	// Board is the machine as the daemon reads it (api.Board's fields).
	Board    map[string]any `json:"board"`
	Meters   Table          `json:"meters"`
	Backends Table          `json:"backends"`
	// Raw is the whole answer as the daemon sent it, so a report can keep
	// fields this client does not know of.
	Raw json.RawMessage `json:"-"`
}

// Node fetches GET /v1/node.
func (c *Client) Node(ctx context.Context) (*NodeInfo, error) {
	var raw json.RawMessage
	if err := c.getJSON(ctx, "/v1/node", &raw); err != nil {
		return nil, err
	}
	var n NodeInfo
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("meshd: decoding /v1/node: %w", err)
	}
	n.Raw = raw
	return &n, nil
}

// IdleReading is one idle window (POST /v1/meters/idle): the energy the
// backend's span drew with no serve in it.
type IdleReading struct {
	Backend     string `json:"backend"`
	Meter       string `json:"meter"`
	Provenance  string `json:"provenance"`
	EnergyUJ    uint64 `json:"energy_uj"`
	ErrorUJ     uint64 `json:"error_uj"`
	WindowNs    uint64 `json:"window_ns"`
	CoveredPPM  uint64 `json:"covered_ppm"`
	Samples     uint64 `json:"samples"`
	MeanPowerUW uint64 `json:"mean_power_uw"`
}

// Idle measures an idle window of seconds on backend's span. The daemon
// holds the span for the window, so no serve is charged into it.
func (c *Client) Idle(ctx context.Context, backend string, seconds float64) (*IdleReading, error) {
	resp, err := c.do(ctx, http.MethodPost, "/v1/meters/idle", map[string]any{"backend": backend, "seconds": seconds})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r IdleReading
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("meshd: decoding the idle reading: %w", err)
	}
	return &r, nil
}

// Checkpoint asks the daemon to seal a checkpoint now (GET
// /v1/chain/checkpoint) and returns it verified under the steward key; its
// Envelope holds the exact bytes sealed.
func (c *Client) Checkpoint(ctx context.Context) (*steward.SignedCheckpoint, error) {
	resp, err := c.do(ctx, http.MethodGet, "/v1/chain/checkpoint", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	env, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("meshd: reading the checkpoint: %w", err)
	}
	k, err := c.Steward(ctx)
	if err != nil {
		return nil, err
	}
	cp, err := steward.OpenCheckpoint(env, k)
	if err != nil {
		return nil, fmt.Errorf("meshd returned a checkpoint that does not verify: %w", err)
	}
	return cp, nil
}

// Ready reports whether GET /readyz answers ready; the error says why not.
func (c *Client) Ready(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, "/readyz", nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// LiveEvent is one server-sent event of GET /v1/live: "power" (each
// meter's newest reading) or "receipt" (a serve sealed).
type LiveEvent struct {
	Name string
	Data []byte
}

// PowerEvent is the data of a "power" live event.
type PowerEvent struct {
	TMs    int64                `json:"t_ms"`
	Meters map[string]LivePower `json:"meters"`
}

// LivePower is one meter's newest reading in a power event; PowerUW and
// AtMs are absent when the meter has no reading yet.
type LivePower struct {
	PowerUW *uint64 `json:"power_uw,omitempty"`
	AtMs    *int64  `json:"at_ms,omitempty"`
	Healthy bool    `json:"healthy"`
}

// Live follows GET /v1/live (power every interval, 50 ms..10 s; 0 leaves
// the daemon's 200 ms) and hands each event to on until ctx ends (nil), the
// stream ends or on fails (that error).
func (c *Client) Live(ctx context.Context, interval time.Duration, on func(LiveEvent) error) error {
	path := "/v1/live"
	if interval > 0 {
		path += "?interval_ms=" + strconv.FormatInt(interval.Milliseconds(), 10)
	}
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev LiveEvent
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			// A blank line ends the event (the SSE framing).
			if ev.Name != "" || data.Len() > 0 {
				ev.Data = bytes.Clone(data.Bytes())
				if err := on(ev); err != nil {
					return err
				}
			}
			ev, data = LiveEvent{}, bytes.Buffer{}
		case strings.HasPrefix(line, "event: "):
			ev.Name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("meshd: live stream: %w", err)
	}
	return errors.New("meshd: the live stream ended")
}

// ReceiptEnvelopes is Receipts with each receipt's envelope as sealed: up
// to limit verified receipts after sequence after (-1 for the start), their
// envelopes, and the sequence to continue after. A benchmark report encloses
// the envelopes so anyone can verify them again.
func (c *Client) ReceiptEnvelopes(ctx context.Context, after int64, limit int) ([]*steward.Opened, [][]byte, int64, error) {
	var page struct {
		Receipts  []wireReceipt `json:"receipts"`
		NextAfter int64         `json:"next_after"`
	}
	q := "/v1/receipts?limit=" + strconv.Itoa(limit)
	if after >= 0 {
		q += "&after=" + strconv.FormatInt(after, 10)
	}
	if err := c.getJSON(ctx, q, &page); err != nil {
		return nil, nil, after, err
	}
	if len(page.Receipts) == 0 {
		return nil, nil, after, nil
	}
	out := make([]*steward.Opened, 0, len(page.Receipts))
	envs := make([][]byte, 0, len(page.Receipts))
	for i := range page.Receipts {
		o, err := c.openWire(ctx, &page.Receipts[i])
		if err != nil {
			return nil, nil, after, err
		}
		// openWire decoded this already; decoding again keeps it the one
		// place that checks an envelope.
		env, _ := base64.StdEncoding.DecodeString(page.Receipts[i].Envelope)
		out = append(out, o)
		envs = append(envs, env)
	}
	return out, envs, page.NextAfter, nil
}

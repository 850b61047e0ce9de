// Package conformance pins the deterministic reference serve of mesh/1 §7:
// it regenerates signed_core.hex, envelope.hex and meta.json from fixed
// inputs by running the real agent, router, reference engine and steward,
// so any change in encoding or sealing shows up as a byte difference.
package conformance

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"lukechampine.com/blake3"

	"meshd/agent"
	"meshd/engine"
	"meshd/steward"
	"meshd/wire"
)

// Meta is meta.json: every input of the reference serve, and the ids it
// must produce.
type Meta struct {
	Profile        string          `json:"profile"`
	StewardSeedHex string          `json:"steward_seed_hex"`
	StewardID      string          `json:"steward_id"`
	Prompt         string          `json:"prompt"`
	Request        MetaRequest     `json:"request"`
	RequestCBORHex string          `json:"request_cbor_hex"`
	RequestID      string          `json:"request_id"`
	Backends       []MetaBackend   `json:"backends"`
	NonceHex       string          `json:"nonce_hex"`
	ClockStartMs   int64           `json:"clock_start_unix_ms"`
	ClockStepNs    int64           `json:"clock_step_ns"`
	Sequence       uint64          `json:"sequence"`
	Chosen         string          `json:"chosen_backend"`
	Route          string          `json:"route"`
	Candidates     []MetaCandidate `json:"candidates"`
	EnvelopeID     string          `json:"envelope_id"`
}

// MetaRequest is the reference ServeRequest.
type MetaRequest struct {
	PromptHash     string `json:"prompt_hash"`
	PromptTokens   uint32 `json:"prompt_tokens"`
	MaxTokens      uint32 `json:"max_tokens"`
	FidelityFloor  uint8  `json:"fidelity_floor"`
	JouleCeilingUJ uint64 `json:"joule_ceiling_uj"`
}

// MetaBackend is one reference backend, in registration order.
type MetaBackend struct {
	Name       string `json:"name"`
	Fidelity   uint8  `json:"fidelity"`
	UJPerToken uint64 `json:"uj_per_token"`
	Work       int    `json:"work"`
}

// MetaCandidate is the router's record of one backend; backend, fidelity,
// est_total_uj and verdict are what the receipt's x_route_candidates
// carries for it.
type MetaCandidate struct {
	Backend    string `json:"backend"`
	Fidelity   uint8  `json:"fidelity"`
	EstTotalUJ uint64 `json:"est_total_uj"`
	Admissible bool   `json:"admissible"`
	Verdict    string `json:"verdict"`
	Reason     string `json:"reason,omitempty"`
}

// Vectors are the published files, byte for byte: the reference serve's
// three, and the receipt vectors under receipts/.
type Vectors struct {
	SignedCoreHex []byte
	EnvelopeHex   []byte
	MetaJSON      []byte
	// Receipts maps "receipts/<name>/<file>" to its bytes.
	Receipts map[string][]byte
}

// referenceInputs are the fixed inputs of the v1 reference serve.
func referenceInputs() (seed, nonce []byte, prompt string, req wire.ServeRequest, backends []engine.ReferenceConfig) {
	s := blake3.Sum256([]byte("mesh/1 conformance v1 steward seed"))
	n := blake3.Sum256([]byte("mesh/1 conformance v1 nonce"))
	prompt = "Route me to the cheapest model that can explain a hash chain."
	req = wire.ServeRequest{
		PromptHash:     wire.ContentOf([]byte(prompt)),
		PromptTokens:   14,
		MaxTokens:      24,
		FidelityFloor:  wire.F2,
		JouleCeilingUJ: 40_000,
	}
	backends = []engine.ReferenceConfig{
		{Name: "ref-tiny", Fidelity: wire.F1, UJPerToken: 40, Work: 8},
		{Name: "ref-mid", Fidelity: wire.F2, UJPerToken: 300, Work: 64},
		{Name: "ref-mid-b", Fidelity: wire.F3, UJPerToken: 300, Work: 64},
		{Name: "ref-large", Fidelity: wire.F4, UJPerToken: 2500, Work: 512},
	}
	return s[:], n[:steward.NonceSize], prompt, req, backends
}

// Generate runs the reference serve through the real agent into a fresh
// log under scratch and returns the vectors.
func Generate(ctx context.Context, scratch string) (*Vectors, error) {
	seed, nonce, prompt, req, cfgs := referenceInputs()
	key, err := steward.NewKeyFromSeed(seed)
	if err != nil {
		return nil, err
	}
	logDir := filepath.Join(scratch, "reference-log")
	if err := os.RemoveAll(logDir); err != nil {
		return nil, err
	}
	log, _, err := steward.OpenLog(ctx, logDir, steward.LogOptions{Trusted: key.Public()})
	if err != nil {
		return nil, err
	}
	defer log.Close()
	const startMs, stepNs = 1_767_225_600_000, 1_500_000 // 2026-01-01T00:00:00Z, 1.5 ms per clock read
	t := time.UnixMilli(startMs)
	clock := func() time.Time { now := t; t = t.Add(stepNs); return now }
	st := steward.New(key, log, steward.Options{Rand: bytes.NewReader(nonce), Clock: clock})
	var backends []engine.Backend
	meta := Meta{Profile: steward.Profile, StewardSeedHex: hex.EncodeToString(seed), StewardID: key.ID(), Prompt: prompt,
		NonceHex: hex.EncodeToString(nonce), ClockStartMs: startMs, ClockStepNs: stepNs}
	for _, c := range cfgs {
		b, err := engine.NewReference(c)
		if err != nil {
			return nil, err
		}
		backends = append(backends, b)
		meta.Backends = append(meta.Backends, MetaBackend{c.Name, uint8(c.Fidelity), c.UJPerToken, c.Work})
	}
	ag, err := agent.New(agent.Config{Backends: backends, Steward: st, Clock: clock})
	if err != nil {
		return nil, err
	}
	resp, err := ag.Serve(ctx, req, []byte(prompt))
	if err != nil {
		return nil, fmt.Errorf("reference serve: %w", err)
	}
	reqCBOR, err := req.MarshalCBOR()
	if err != nil {
		return nil, err
	}
	meta.Request = MetaRequest{req.PromptHash.String(), req.PromptTokens, req.MaxTokens, uint8(req.FidelityFloor), req.JouleCeilingUJ}
	meta.RequestCBORHex = hex.EncodeToString(reqCBOR)
	meta.RequestID = resp.RequestID.String()
	meta.Sequence = resp.Sealed.Receipt.Sequence
	meta.Chosen = resp.Sealed.Receipt.Backend
	meta.Route = resp.Decision.Justification
	for _, c := range resp.Decision.Candidates {
		meta.Candidates = append(meta.Candidates, MetaCandidate{c.Backend, uint8(c.Fidelity), c.EstTotalUJ, c.Admissible, string(c.Verdict), c.Reason})
	}
	meta.EnvelopeID = resp.Sealed.ID.String()
	core, err := resp.Sealed.Receipt.EncodeCore()
	if err != nil {
		return nil, err
	}
	var mj bytes.Buffer
	enc := json.NewEncoder(&mj)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(meta); err != nil {
		return nil, err
	}
	receipts, err := ReceiptFiles()
	if err != nil {
		return nil, err
	}
	return &Vectors{
		SignedCoreHex: []byte(hex.EncodeToString(core) + "\n"),
		EnvelopeHex:   []byte(hex.EncodeToString(resp.Sealed.Envelope) + "\n"),
		MetaJSON:      mj.Bytes(),
		Receipts:      receipts,
	}, nil
}

// Files maps each vector file, named relative to the v1 directory with
// forward slashes, to its bytes.
func (v *Vectors) Files() map[string][]byte {
	f := map[string][]byte{
		"reference/signed_core.hex": v.SignedCoreHex,
		"reference/envelope.hex":    v.EnvelopeHex,
		"reference/meta.json":       v.MetaJSON,
	}
	for name, b := range v.Receipts {
		f[name] = b
	}
	return f
}

// Write writes the vectors into dir. receipts/ is replaced as a whole, so
// a vector dropped from the generator does not linger on disk.
func (v *Vectors) Write(dir string) error {
	if err := os.RemoveAll(filepath.Join(dir, "receipts")); err != nil {
		return fmt.Errorf("write vectors: %w", err)
	}
	for name, b := range v.Files() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write vectors: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return fmt.Errorf("write vectors: %w", err)
		}
	}
	return nil
}

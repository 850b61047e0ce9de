package api

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"meshd/internal/buildinfo"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"

	"meshd/agent"
	"meshd/steward"
)

// What a benchmark harness needs of the daemon: the board and meter
// inventory, an idle window on a backend's span, a fresh checkpoint that
// anchors the receipts of a run, and a live stream of power and receipts.
// Nothing here signs a digest the caller chose: a report's figures follow
// from the sealed chain (PROFILE §20, §22).

// Board describes the machine, as a report records it.
type Board struct {
	CPUModel        string `json:"cpu_model"`
	Cores           int    `json:"cores"`
	MemoryBytes     uint64 `json:"memory_bytes"`
	Kernel          string `json:"kernel"`
	DeviceTreeModel string `json:"device_tree_model,omitempty"`
	Arch            string `json:"arch"`
}

// ReadBoard reads the board's description from /proc and /sys; what a
// machine does not publish is left empty.
func ReadBoard() Board {
	b := Board{Cores: runtime.NumCPU(), Arch: runtime.GOARCH}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "model name", "Model", "Hardware", "cpu model":
				if b.CPUModel == "" {
					b.CPUModel = strings.TrimSpace(v)
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
						b.MemoryBytes = kb * 1024
					}
				}
			}
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		b.Kernel = strings.TrimSpace(string(data))
	}
	if data, err := os.ReadFile("/proc/device-tree/model"); err == nil {
		b.DeviceTreeModel = strings.TrimRight(string(data), "\x00\n")
	}
	return b
}

// Version is the daemon's build as one string — module version, VCS
// revision and dirty flag, Go version, platform (buildinfo.Info.String) —
// the same in GET /v1/node, a run-open record and a benchmark report's
// harness.
func Version() string { return buildinfo.Read().String() }

// nodeInfo is GET /v1/node: who this is and what it measures with.
func (s *Server) nodeInfo(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	var backends []map[string]any
	for _, b := range s.node.Backends() {
		row := map[string]any{"name": b.Config.Name, "kind": b.Config.Kind, "recipe": b.Engine.Recipe(),
			"fidelity": b.Config.Fidelity, "uj_per_token": b.Config.UJPerToken, "meters": b.Config.Meters}
		if b.Span != nil {
			row["span"] = b.Span.Name()
		}
		backends = append(backends, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"steward": s.node.Key.ID(), "version": Version(), "board": ReadBoard(),
		"meters": s.meterRows(), "backends": backends})
}

// meterRows is the meter inventory as GET /v1/node answers it, which a
// run-open record also binds (PROFILE §22).
func (s *Server) meterRows() []map[string]any {
	var meters []map[string]any
	for _, m := range s.node.Meters() {
		info := m.Meter.Info()
		c := m.Config
		row := map[string]any{"name": c.Name, "driver": c.Driver, "sensor": m.Meter.Name(), "kind": info.Kind.String(),
			"period_ns": info.Period.Nanoseconds(), "max_period_ns": info.MaxPeriod.Nanoseconds(),
			"declared_accuracy_ppm": info.Accuracy.DeclaredPPM}
		for k, v := range map[string]any{"bus": c.Bus, "rail": c.Rail, "zone": c.Zone, "device": c.Device, "preset": c.Preset} {
			if v != "" {
				row[k] = v
			}
		}
		if c.Address != 0 {
			row["address"] = fmt.Sprintf("0x%02x", c.Address)
		}
		if c.ShuntUOhm != 0 {
			row["shunt_uohm"] = c.ShuntUOhm
		}
		if c.MaxCurrentA != 0 {
			row["max_current_a"] = c.MaxCurrentA
		}
		if c.Driver == "nvml" {
			row["gpu"] = c.GPU
		}
		meters = append(meters, row)
	}
	return meters
}

// checkpoint is GET /v1/chain/checkpoint: a checkpoint sealed now (the
// log made durable to its head first), as its COSE envelope. It anchors
// every receipt sealed before it.
func (s *Server) checkpoint(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	cp, err := s.node.Stores.Log.Checkpoint(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, apiError{Message: err.Error(), Code: "checkpoint"})
		return
	}
	if cp == nil {
		writeError(w, http.StatusNotFound, apiError{Message: "the log is empty: there is nothing to anchor", Code: "not_found", Type: "not_found"})
		return
	}
	w.Header().Set("Content-Type", "application/cose; cose-type=\"cose-sign1\"")
	w.Header().Set("Mesh-Checkpoint-Count", strconv.FormatUint(cp.Count, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(cp.Envelope)
}

// idle is POST /v1/meters/idle {"backend", "seconds", "run"?}: a metered
// window on the backend's span with no serve in it, sealed as an idle
// record (PROFILE §22), for a benchmark's idle baseline. Under the
// exclusive policy it waits for the span like a serve and holds it, so no
// serve is charged into it.
func (s *Server) idle(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Backend string   `json:"backend"`
		Seconds *float64 `json:"seconds"`
		Run     *uint64  `json:"run"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if body.Seconds == nil || *body.Seconds <= 0 || *body.Seconds > 600 || math.Round(*body.Seconds*1000) < 1 {
		badField(w, "seconds", "want 0.001 <= seconds <= 600")
		return
	}
	d := time.Duration(math.Round(*body.Seconds*1000)) * time.Millisecond
	done, ok := s.admit(w)
	if !ok {
		return
	}
	defer done()
	ctx, cancel := context.WithTimeout(r.Context(), d+30*time.Second)
	defer cancel()
	rec, rd, err := s.node.Agent.Idle(ctx, body.Backend, d, body.Run)
	if err != nil {
		var fe *agent.FieldError
		switch {
		case errors.As(err, &fe):
			badField(w, fe.Field, fe.Msg)
		case errors.Is(err, agent.ErrRunNotOpen):
			writeError(w, http.StatusConflict, apiError{Message: err.Error(), Param: "run", Code: "run_not_open"})
		case errors.Is(err, agent.ErrIdleShared):
			writeError(w, http.StatusConflict, apiError{Message: err.Error(), Code: "idle_shared"})
		case ctx.Err() != nil:
			writeError(w, http.StatusRequestTimeout, apiError{Message: "the client left before the idle window closed", Code: "cancelled"})
		case errors.Is(err, agent.ErrUnmetered):
			writeError(w, http.StatusServiceUnavailable, apiError{Message: err.Error(), Code: "unmetered"})
		default:
			writeError(w, http.StatusInternalServerError, apiError{Message: err.Error(), Code: "seal"})
		}
		return
	}
	m := rd.Metering
	sd := rec.Sealed
	writeJSON(w, http.StatusOK, map[string]any{"backend": body.Backend, "meter": m.Meter, "provenance": sd.Receipt.EnergyProvenance,
		"energy_uj": rd.EnergyUJ, "error_uj": m.ErrorUJ, "window_ns": m.WindowNs, "covered_ppm": m.CoveredPPM, "samples": m.Samples,
		"mean_power_uw": meanPowerUW(rd.EnergyUJ, m.WindowNs),
		"sequence":      sd.Receipt.Sequence, "id": sd.ID.String(), "envelope": base64.StdEncoding.EncodeToString(sd.Envelope),
		"document": base64.StdEncoding.EncodeToString(rec.Document)})
}

func meanPowerUW(uj, ns uint64) uint64 {
	if ns == 0 {
		return 0
	}
	return uint64(float64(uj) * 1e9 / float64(ns))
}

// Attestation is what a key signs over a document such as a fleet
// report: its purpose, its SHA-256, who and when. The purpose
// keeps a signature over one kind of document from passing for another,
// and none of them can pass for a receipt (whose payload is a receipt
// map, PROFILE §6).
type Attestation struct {
	Purpose  string `cbor:"mesh_attest"`
	SHA256   []byte `cbor:"sha256"`
	Steward  string `cbor:"steward"`
	SealedMs uint64 `cbor:"sealed_unix_ms"`
}

// AttestPurposes are the documents an Attestation may be for. The
// daemon signs none of them: a fleet report is signed by the operator's
// own key (meshctl, locally), and a bench report needs no signature over
// its body (PROFILE §20: its figures follow from the sealed chain).
var AttestPurposes = map[string]bool{"meshd-bench-report/v1": true, "meshd-fleet-report/v1": true}

// OpenAttestation verifies an attestation envelope under trusted and
// returns what it says.
func OpenAttestation(env []byte, trusted ed25519.PublicKey) (*Attestation, error) {
	payload, _, err := steward.OpenTrusted(env, func(k ed25519.PublicKey) error {
		if !k.Equal(trusted) {
			return errors.New("signed by another key")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var a Attestation
	if err := cbor.Unmarshal(payload, &a); err != nil {
		return nil, fmt.Errorf("attestation payload: %w", err)
	}
	if !AttestPurposes[a.Purpose] || len(a.SHA256) != 32 {
		return nil, fmt.Errorf("attestation payload is not an attestation (purpose %q)", a.Purpose)
	}
	return &a, nil
}

// events fans serve ends out to live streams; a slow subscriber misses
// events rather than holding a serve up.
type events struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
}

func (e *events) subscribe() (chan []byte, func()) {
	ch := make(chan []byte, 64)
	e.mu.Lock()
	if e.subs == nil {
		e.subs = map[chan []byte]struct{}{}
	}
	e.subs[ch] = struct{}{}
	e.mu.Unlock()
	return ch, func() {
		e.mu.Lock()
		delete(e.subs, ch)
		e.mu.Unlock()
	}
}

// listened reports whether anyone subscribes now, so a serve with no
// live listener does not build a row nobody reads.
func (e *events) listened() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.subs) > 0
}

func (e *events) publish(b []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.subs {
		select {
		case ch <- b:
		default:
		}
	}
}

// Served is told of every serve's end (pass it as the node's Observe) and
// puts sealed ones on the live stream.
func (s *Server) Served(ev agent.Event) {
	if ev.Sealed == nil || !s.events.listened() {
		return
	}
	rc := ev.Sealed.Receipt
	row := map[string]any{"sequence": rc.Sequence, "id": ev.Sealed.ID.String(), "backend": rc.Backend, "provenance": rc.EnergyProvenance,
		"tokens_in": rc.TokensIn, "tokens_out": rc.TokensOut, "tokens_accepted": rc.TokensAccepted}
	if e, err := rc.Energy(); err == nil {
		row["charged_uj"] = e.UJ()
	}
	if rc.UJPerAcceptedToken != nil {
		row["uj_per_accepted_token"] = *rc.UJPerAcceptedToken
	}
	if rc.ErrorUJ != nil {
		row["error_uj"] = *rc.ErrorUJ
	}
	if rc.WindowNs != nil {
		row["window_ns"] = *rc.WindowNs
	}
	if rc.SealedUnixMs != nil {
		row["sealed_unix_ms"] = *rc.SealedUnixMs
	}
	b, _ := json.Marshal(row)
	s.events.publish(b)
}

// live is GET /v1/live: server-sent events, "power" every interval
// (default 200 ms, 50 ms..10 s) with each meter's newest reading, and
// "receipt" as each serve is sealed.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "interval_ms")
	if !ok {
		return
	}
	ms, ok := uintParam(w, q, "interval_ms", 50, 10000, 200)
	if !ok {
		return
	}
	interval := time.Duration(ms) * time.Millisecond
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sub, unsub := s.events.subscribe()
	defer unsub()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	send := func(event string, data []byte) bool {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	power := func() bool {
		p := map[string]any{"t_ms": time.Now().UnixMilli()}
		meters := map[string]any{}
		for _, m := range s.node.Meters() {
			row := map[string]any{"healthy": m.Meter.Health() == nil}
			if uw, at, ok := m.Meter.Latest(); ok {
				row["power_uw"], row["at_ms"] = uw, at.UnixMilli()
			}
			meters[m.Config.Name] = row
		}
		p["meters"] = meters
		b, _ := json.Marshal(p)
		return send("power", b)
	}
	if !power() {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-tick.C:
			if !power() {
				return
			}
		case b := <-sub:
			if !send("receipt", b) {
				return
			}
		}
	}
}

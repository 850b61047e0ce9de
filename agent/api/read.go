package api

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"meshd/steward"
)

// maxPage bounds one page of GET /v1/receipts.
const maxPage = 1000

// receipts is GET /v1/receipts?after=SEQ&limit=N: the receipts after
// sequence SEQ (from the first when absent), oldest first, each decoded
// and with its envelope, and the sequence to ask for next.
func (s *Server) receipts(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r, "after", "limit")
	if !ok {
		return
	}
	from := uint64(0)
	if _, ok := q["after"]; ok {
		// The last sequence is below 2^64-1, so after it is too: the next
		// one must exist.
		v, ok := uintParam(w, q, "after", 0, math.MaxUint64-1, 0)
		if !ok {
			return
		}
		from = v + 1
	}
	lim, ok := uintParam(w, q, "limit", 1, maxPage, 100)
	if !ok {
		return
	}
	limit := int(lim)
	log := s.node.Stores.Log
	envs, err := log.Range(r.Context(), from, limit)
	if err != nil {
		writeError(w, http.StatusInternalServerError, apiError{Message: err.Error(), Code: "log_read"})
		return
	}
	trusted := s.node.Trusted()
	out := make([]*Receipt, 0, len(envs))
	for i, env := range envs {
		o, err := steward.OpenEnvelope(env, trusted)
		if err != nil {
			writeError(w, http.StatusInternalServerError, apiError{Message: fmt.Sprintf("receipt %d does not open: %v", from+uint64(i), err), Code: "log_damaged"})
			return
		}
		out = append(out, &Receipt{ID: o.ID.String(), Sequence: o.Receipt.Sequence, Receipt: ReceiptFields(o.Receipt),
			Envelope: base64.StdEncoding.EncodeToString(env), RouteCandidates: RouteCandidates(o.Receipt)})
	}
	next := from + uint64(len(out))
	writeJSON(w, http.StatusOK, map[string]any{"receipts": out, "next_after": int64(next) - 1, "durable": log.Durable()})
}

// receipt is GET /v1/receipts/{seq}: the raw COSE envelope, exactly as
// sealed, for verification by any mesh/1 implementation.
func (s *Server) receipt(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		badField(w, "seq", "want a receipt sequence number")
		return
	}
	envs, err := s.node.Stores.Log.Range(r.Context(), seq, 1)
	if err != nil {
		writeError(w, http.StatusInternalServerError, apiError{Message: err.Error(), Code: "log_read"})
		return
	}
	if len(envs) == 0 {
		writeError(w, http.StatusNotFound, apiError{Message: fmt.Sprintf("no receipt %d (the log holds %d)", seq, s.node.Stores.Log.Durable()), Code: "not_found", Type: "not_found"})
		return
	}
	w.Header().Set("Content-Type", "application/cose; cose-type=\"cose-sign1\"")
	w.Header().Set("Mesh-Receipt-Seq", strconv.FormatUint(seq, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(envs[0])
}

// head is GET /v1/chain/head: the steward, how many receipts the chain
// holds and the content id of the last. Both come from the log's memory
// of what it made durable: reading the last envelope back from its
// segment and checking its signature on every call cost more than the
// rest of the request (verifying the files is meshctl verify's work).
func (s *Server) head(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	n, id := s.node.Stores.Log.DurableHead()
	out := map[string]any{"steward": s.node.Key.ID(), "receipts": n}
	if n > 0 {
		out["head"] = id.String()
		out["sequence"] = n - 1
	}
	writeJSON(w, http.StatusOK, out)
}

// backends is GET /v1/backends: what the router weighs.
func (s *Server) backends(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	byName := map[string]int{}
	nb := s.node.Backends()
	for i, b := range nb {
		byName[b.Config.Name] = i
	}
	var out []map[string]any
	for _, bi := range s.node.Agent.Backends() {
		b := bi.Backend
		row := map[string]any{
			"name": b.Name(), "recipe": b.Recipe(), "fidelity": uint8(b.Fidelity()),
			"configured_uj_per_token": b.UJPerToken(), "routing_uj_per_token": bi.CostUJ, "cost_source": bi.CostSource,
			"learned": bi.Learned, "state": "ready",
		}
		if i, ok := byName[b.Name()]; ok {
			nbk := nb[i]
			row["kind"] = nbk.Config.Kind
			row["state"] = nbk.State()
			row["restarts"] = nbk.Restarts()
			row["meters"] = nbk.Config.Meters
		}
		if bi.Meter != nil {
			row["span"] = bi.Meter.Name()
		}
		out = append(out, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"backends": out})
}

// meters is GET /v1/meters: each meter's live power, health, counters,
// the best provenance its kind supports and its newest sealed window.
// Live power is the newest reading, for display: it measures no window.
func (s *Server) meters(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	out := []map[string]any{} // none is an empty list, not null
	for _, m := range s.node.Meters() {
		info := m.Meter.Info()
		st := m.Meter.Stats()
		row := map[string]any{
			"name": m.Config.Name, "driver": m.Config.Driver, "kind": info.Kind.String(),
			"period_ns": info.Period.Nanoseconds(),
			"readings":  st.Entries, "invalid": st.Invalid, "stalls": st.Stalls, "healthy": true,
		}
		// The best a window of this meter can be sealed as; each window's
		// evidence decides what it actually is.
		if info.Kind.Hardware() {
			row["best_provenance"] = "HwShunt"
		} else {
			row["best_provenance"] = "ModelBased"
		}
		if uw, at, ok := m.Meter.Latest(); ok {
			row["power_uw"] = uw
			row["power_at"] = at.UTC().Format(time.RFC3339Nano)
		}
		if err := m.Meter.Health(); err != nil {
			row["healthy"] = false
			row["health"] = err.Error()
		}
		if st.LastErr != nil {
			row["last_error"] = st.LastErr.Error()
		}
		if w, ok := s.node.LastWindow(m); ok {
			lw := map[string]any{"sequence": w.Sequence, "backend": w.Backend, "provenance": w.Provenance,
				"charged_uj": w.ChargedUJ, "window_ns": w.WindowNs}
			if w.ErrorUJ != nil {
				lw["error_uj"] = *w.ErrorUJ
			}
			if w.ServeNs != nil {
				lw["serve_ns"] = *w.ServeNs
			}
			row["last_window"] = lw
		}
		if m.Config.Inside != "" {
			row["inside"] = m.Config.Inside
		}
		// A meter inside another member of its span is never added to the
		// figure: its reading of the span's last window is shown apart.
		if b, ok := s.node.Breakdown(m); ok {
			row["breakdown"] = map[string]any{"inside": b.Inside, "energy_uj": b.Reading.EnergyUJ,
				"error_uj": b.Reading.Metering.ErrorUJ, "provenance": b.Reading.Provenance.String(),
				"window_ns": b.Reading.Metering.WindowNs}
		}
		out = append(out, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"meters": out})
}

// models is GET /v1/models: the backends, as OpenAI clients list models.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	// Each id here pins a serve to its backend (PROFILE §16); any other
	// model id is served where routing decides.
	data := []map[string]any{}
	for _, m := range s.modelIDs() {
		data = append(data, map[string]any{"id": m[0], "object": "model", "owned_by": "meshd", "created": 0,
			"backend": m[1], "pins": true})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// healthz says the process answers.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz says whether serves should be sent here: not while draining, nor
// while the node is failing.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, apiError{Message: "draining", Code: "draining"})
		return
	}
	if err := s.node.Storage(); err != nil {
		writeError(w, http.StatusServiceUnavailable, apiError{Message: err.Error(), Code: "storage_unavailable"})
		return
	}
	if err := s.node.Alive(); err != nil {
		writeError(w, http.StatusServiceUnavailable, apiError{Message: err.Error(), Code: "not_ready"})
		return
	}
	if s.opts.Ready != nil {
		if err := s.opts.Ready(); err != nil {
			writeError(w, http.StatusServiceUnavailable, apiError{Message: err.Error(), Code: "not_ready"})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// corpora is GET /v1/rag: the corpora served here and where.
func (s *Server) corpora(w http.ResponseWriter, r *http.Request) {
	if _, ok := query(w, r); !ok {
		return
	}
	var out []map[string]any
	for _, p := range s.node.Providers() {
		d := p.Description()
		out = append(out, map[string]any{"org": p.Org, "name": p.Name, "corpus_hash": d.CorpusHash, "model": d.Model, "dim": d.Dim,
			"repos": len(d.Repos), "chunks": len(p.Corpus().Chunks), "signed_by": d.SignedBy,
			"procedures": "/v1/rag/" + p.Org + "/" + p.Name + "/{describe_corpus,answer_query,get_chunk_by_id,get_document_verbatim,list_sources_page}"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"corpora": out})
}

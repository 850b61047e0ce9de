package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"meshd/agent"
	"meshd/rag"
	"meshd/steward"
)

// Runs (PROFILE §22): a benchmark opens a run with a sealed run-open
// record, names it on its serves and idle windows, and closes it with a
// sealed run-close that states what the daemon counted.

// recordReply is a sealed record as the API answers it: the envelope and
// the document its request_id addresses, both in standard base64.
func recordReply(rec *agent.SealedRecord, extra map[string]any) map[string]any {
	out := map[string]any{"sequence": rec.Sealed.Receipt.Sequence, "id": rec.Sealed.ID.String(),
		"envelope": base64.StdEncoding.EncodeToString(rec.Sealed.Envelope), "document": base64.StdEncoding.EncodeToString(rec.Document)}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// canonicalJSON is the RFC 8785 form of v as encoding/json writes it, so
// that it equals the canonical form of the same member of GET /v1/node.
func canonicalJSON(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	c, err := rag.Canonical(b)
	return string(c), err
}

// openRun is POST /v1/runs {"workload_sha256", "repetitions",
// "serves_declared", "harness", "caller"}: seals a run-open record binding
// those and the node's board, version and meters as GET /v1/node reports
// them, and answers {run, sequence, id, envelope, document}.
func (s *Server) openRun(w http.ResponseWriter, r *http.Request) {
	var body struct {
		WorkloadSHA256 string  `json:"workload_sha256"`
		Repetitions    *uint64 `json:"repetitions"`
		ServesDeclared *uint64 `json:"serves_declared"`
		Harness        string  `json:"harness"`
		Caller         string  `json:"caller"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if s.draining.Load() {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, apiError{Message: "meshd is shutting down", Code: "draining"})
		return
	}
	d := agent.RunOpen{WorkloadSHA256: body.WorkloadSHA256, Harness: body.Harness, Caller: body.Caller, Version: Version()}
	if body.Repetitions != nil {
		d.Repetitions = *body.Repetitions
	}
	if body.ServesDeclared != nil {
		d.ServesDeclared = *body.ServesDeclared
	}
	var err error
	if d.Board, err = canonicalJSON(ReadBoard()); err == nil {
		d.Meters, err = canonicalJSON(s.meterRows())
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, apiError{Message: "the node's inventory: " + err.Error()})
		return
	}
	rec, err := s.node.Agent.OpenRun(r.Context(), d)
	if err != nil {
		s.runError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, recordReply(rec, map[string]any{"run": rec.Sealed.Receipt.Sequence}))
}

// closeRun is POST /v1/runs/{run}/close {"reason"?, "trace_sha256"?}: seals the run-close
// once the run's serves in flight end, and answers {run, sequence, id,
// status, reason?, serves_declared, serves_sealed, envelope, document}.
func (s *Server) closeRun(w http.ResponseWriter, r *http.Request) {
	run, err := strconv.ParseUint(r.PathValue("run"), 10, 64)
	if err != nil {
		badField(w, "run", "want the run-open record's sequence")
		return
	}
	var body struct {
		Reason      string `json:"reason"`
		TraceSHA256 string `json:"trace_sha256"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, &body) {
		return
	}
	rec, err := s.node.Agent.CloseRunWith(r.Context(), run, agent.RunClose{Reason: body.Reason, TraceSHA256: body.TraceSHA256})
	if err != nil {
		s.runError(w, err)
		return
	}
	rc := rec.Sealed.Receipt
	reply := map[string]any{"run": *rc.Run}
	// The document is the daemon's own: decoding it cannot fail, and the
	// answer's figures are the sealed ones.
	if doc, derr := steward.DecodeRunCloseDoc(rec.Document); derr == nil {
		reply["status"], reply["serves_declared"], reply["serves_sealed"] = doc.Status, doc.ServesDeclared, doc.ServesSealed
		if doc.Reason != "" {
			reply["reason"] = doc.Reason
		}
		if doc.TraceSHA256 != "" {
			reply["trace_sha256"] = doc.TraceSHA256
		}
	}
	writeJSON(w, http.StatusOK, recordReply(rec, reply))
}

func (s *Server) runError(w http.ResponseWriter, err error) {
	var fe *agent.FieldError
	switch {
	case errors.As(err, &fe):
		badField(w, fe.Field, fe.Msg)
	case errors.Is(err, agent.ErrRunNotOpen):
		writeError(w, http.StatusConflict, apiError{Message: err.Error(), Param: "run", Code: "run_not_open"})
	default:
		s.log.Error("sealing a run record", "err", err)
		writeError(w, http.StatusInternalServerError, apiError{Message: err.Error(), Code: "seal"})
	}
}

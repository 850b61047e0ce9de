package api

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"meshd/engine"
)

// unservedField is a request field meshd cannot honour: present (and not
// its harmless default), the request is refused naming it, never served
// as if it had been read.
type unservedField struct {
	name string
	raw  json.RawMessage // nil when absent or at its default
	why  string
}

func refuseUnserved(w http.ResponseWriter, fields []unservedField) bool {
	for _, f := range fields {
		if len(f.raw) > 0 && string(f.raw) != "null" {
			writeError(w, http.StatusBadRequest, apiError{Message: f.name + ": not supported: " + f.why, Param: f.name, Code: "unsupported_field"})
			return false
		}
	}
	return true
}

// falseOr is raw unless it is false (the default, asking for nothing).
func falseOr(raw json.RawMessage) json.RawMessage {
	if string(raw) == "false" {
		return nil
	}
	return raw
}

// oneOr is raw unless it is 1 (the default).
func oneOr(raw json.RawMessage) json.RawMessage {
	if string(raw) == "1" {
		return nil
	}
	return raw
}

// textOr is a response_format unless it is {"type":"text"}, the default:
// plain text is what every engine makes.
func textOr(raw json.RawMessage) json.RawMessage {
	var f struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &f) == nil && f.Type == "text" {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) == nil && len(m) == 1 {
			return nil
		}
	}
	return raw
}

// parseStop reads OpenAI's stop: absent or null, a string, or an array of
// at most engine.MaxStop non-empty strings.
func parseStop(w http.ResponseWriter, raw json.RawMessage) ([]string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var stop []string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		stop = []string{one}
	} else if err := json.Unmarshal(raw, &stop); err != nil {
		badField(w, "stop", "want a string or an array of strings")
		return nil, false
	}
	if err := engine.CheckStop(stop); err != nil {
		badField(w, "stop", strings.TrimPrefix(err.Error(), "bad request: "))
		return nil, false
	}
	return stop, true
}

// randomID is 24 hex digits from the system's random source.
func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// pins maps each model id that pins a serve (a routed backend's name, or
// an alias the configuration gives it) to the backend's name.
func (s *Server) pins() map[string]string {
	out := map[string]string{}
	for _, bi := range s.node.Agent.Backends() {
		out[bi.Backend.Name()] = bi.Backend.Name()
	}
	for _, b := range s.node.Backends() {
		if _, ok := out[b.Config.Name]; !ok {
			continue // not routed now
		}
		for _, a := range b.Config.Aliases {
			out[a] = b.Config.Name
		}
	}
	return out
}

// pinned is the backend a request's model pins the serve to, "" when it
// names none (routing decides, PROFILE §16).
func (s *Server) pinned(model string) string {
	if model == "" {
		return ""
	}
	return s.pins()[model]
}

// modelIDs lists the pinning ids, sorted, each with its backend.
func (s *Server) modelIDs() [][2]string {
	var out [][2]string
	for id, b := range s.pins() {
		out = append(out, [2]string{id, b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// capabilityStatus maps an engine that cannot do what was asked to a 400
// naming the field: asking again will not help, so it must not be a 5xx
// a client retries.
func capabilityStatus(err error, e apiError) (int, apiError, bool) {
	switch {
	case errors.Is(err, engine.ErrNoChat):
		e.Code, e.Param = "chat_unsupported", "messages"
		e.Message = fmt.Sprintf("the backend's model has no chat template; use /v1/completions, or pin a backend with one (model): %s", e.Message)
	case errors.Is(err, engine.ErrNoEmbed):
		// An embedding serve with no embedding backend, or a serve pinned
		// to one that only embeds: the model named is the fault.
		e.Code, e.Param = "wrong_backend_kind", "model"
	case errors.Is(err, engine.ErrNoStop):
		e.Code, e.Param = "unsupported_field", "stop"
	default:
		return 0, e, false
	}
	e.Type = "invalid_request_error"
	return http.StatusBadRequest, e, true
}

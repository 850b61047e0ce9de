package api

import (
	"fmt"
	"net/http"

	"meshd/auth"
)

// Route is one registered pattern and the roles that may call it (any
// one suffices); Open routes need none.
type Route struct {
	Pattern string
	Needs   auth.Roles
}

// Open is the requirement of a route anyone may call: health probes.
const Open auth.Roles = 0

// Routes lists every pattern the server registered, with its roles, in
// registration order: PROFILE §16's table.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// handle registers h at pattern behind a check that the caller holds one
// of needs. Every route goes through here, so none exists without a
// decision about who may call it.
func (s *Server) handle(needs auth.Roles, pattern string, h http.Handler) {
	s.routes = append(s.routes, Route{Pattern: pattern, Needs: needs})
	if needs == Open {
		s.mux.Handle(pattern, h)
		return
	}
	s.mux.Handle(pattern, s.guard(needs, h))
}

func (s *Server) handleFunc(needs auth.Roles, pattern string, h http.HandlerFunc) {
	s.handle(needs, pattern, h)
}

// guard refuses a caller without one of needs: 401 when no credential
// was recognised (or a token was wrong), 403 when one was but lacks the
// role. Without an authenticator (tests, embedding) everything is let
// through.
func (s *Server) guard(needs auth.Roles, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.allowed(w, r, needs, r.Pattern) {
			h.ServeHTTP(w, r)
		}
	})
}

// allowed reports whether r's caller holds one of needs for what, and
// answers the refusal when not.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request, needs auth.Roles, what string) bool {
	if s.opts.Auth == nil {
		return true
	}
	id := s.opts.Auth.Identify(r)
	switch {
	case id.BadToken:
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshd", error="invalid_token"`)
		writeAuthError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"the bearer token is not one this node knows")
	case id.Roles&needs != 0:
		return true
	case !id.Authenticated():
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshd"`)
		writeAuthError(w, http.StatusUnauthorized, "invalid_request_error", "unauthenticated",
			fmt.Sprintf("%s needs role %s: present a bearer token (Authorization: Bearer ...) or a client certificate", what, rolesOr(needs)))
	default:
		writeAuthError(w, http.StatusForbidden, "permission_error", "role_required",
			fmt.Sprintf("%s needs role %s; this caller (%s) holds %s", what, rolesOr(needs), joinVia(id.Via), id.Roles))
	}
	return false
}

// runAllowed checks a serve that names a run: it joins a benchmark's
// tally, which is the operator's, so it needs operate besides serve.
func (s *Server) runAllowed(w http.ResponseWriter, r *http.Request, run *uint64) bool {
	return run == nil || s.allowed(w, r, auth.Roles(auth.Operate), "a serve naming a run")
}

// authError is OpenAI's error body as it sends it for a bad key: param
// present and null.
type authError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Code    string  `json:"code"`
	Param   *string `json:"param"`
}

func writeAuthError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]authError{"error": {Message: msg, Type: typ, Code: code}})
}

func rolesOr(rs auth.Roles) string {
	s := ""
	for _, n := range auth.RoleNames() {
		r, _ := auth.ParseRoles([]string{n})
		if rs&r != 0 {
			if s != "" {
				s += " or "
			}
			s += n
		}
	}
	return s
}

func joinVia(v []string) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

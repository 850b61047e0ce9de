package api

import (
	"net/http"
	"slices"
)

// cors answers cross-origin requests from the browser origins the
// configuration allows ([listen] cors_origins; none by default, and then
// no CORS header is ever sent, so a page elsewhere cannot read the API).
//
// It runs before authentication: a preflight (OPTIONS with
// Access-Control-Request-Method) carries no credentials by the Fetch
// standard, so it is answered here, 204 with what may be sent, and never
// reaches a route. The request that follows carries its Authorization
// header (allowed below) and is authenticated as any other; the allowed
// origin is echoed on every answer to it, refusals included, so the page
// can read why it was refused. Cookies are never used, so credentials
// mode is not offered (no Access-Control-Allow-Credentials).
type cors struct {
	origins []string
	any     bool // "*"
}

// corsMethods and corsHeaders are what a preflight allows: every method
// the API routes, the headers its clients send.
const (
	corsMethods = "GET, POST, PUT, DELETE, OPTIONS"
	corsHeaders = "Authorization, Content-Type, Accept, Last-Event-ID, X-Requested-With"
	// corsExpose are the response headers a page may read beyond the
	// CORS-safelisted ones: when to retry a 503 or 429.
	corsExpose = "Retry-After"
	corsMaxAge = "600"
)

func newCORS(origins []string) *cors {
	if len(origins) == 0 {
		return nil
	}
	return &cors{origins: origins, any: slices.Contains(origins, "*")}
}

// handle adds the CORS headers for r's origin and reports whether it
// answered r itself (a preflight).
func (c *cors) handle(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
	h := w.Header()
	h.Add("Vary", "Origin")
	if origin == "" || !(c.any || slices.Contains(c.origins, origin)) {
		if preflight {
			// Answered without CORS headers: the browser refuses the
			// request, and it never reaches a route.
			w.WriteHeader(http.StatusNoContent)
			return true
		}
		return false
	}
	allow := origin
	if c.any {
		allow = "*"
	}
	h.Set("Access-Control-Allow-Origin", allow)
	if !preflight {
		h.Set("Access-Control-Expose-Headers", corsExpose)
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", corsMethods)
	h.Set("Access-Control-Allow-Headers", corsHeaders) // fixed, never an echo of the request
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
	return true
}

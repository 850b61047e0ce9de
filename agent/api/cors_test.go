package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"meshd/agent/api"
	"meshd/agent/api/apitest"
	"meshd/agent/node"
	"meshd/auth"
)

// CORS is off unless origins are configured; a preflight from an allowed
// origin is answered before authentication (it carries no credentials),
// and the request after it is authenticated as any other, with the origin
// echoed so the page can read a refusal too.
func TestCORS(t *testing.T) {
	st := apitest.Start(t, apitest.RefBackends, node.Options{})
	var current atomic.Pointer[node.Node]
	current.Store(st.Node)
	pol := &auth.Policy{Tokens: []auth.Token{{Name: "s", SHA256: auth.HashToken("tok-serve"), Roles: auth.Roles(auth.Serve)}}}
	const page = "https://dash.example.org"
	off := api.New(st.Node, api.Options{Auth: auth.New(pol), Metrics: api.NewMetrics(current.Load)})
	on := api.New(st.Node, api.Options{Auth: auth.New(pol), Metrics: api.NewMetrics(current.Load), CORSOrigins: []string{page}})
	star := api.New(st.Node, api.Options{Auth: auth.New(pol), Metrics: api.NewMetrics(current.Load), CORSOrigins: []string{"*"}})
	t.Cleanup(func() { off.Drain(); on.Drain(); star.Drain() })

	preflight := func(origin string) *http.Request {
		r := httptest.NewRequest(http.MethodOptions, "/v1/serve", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		return r
	}
	serve := func(origin, token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/serve", strings.NewReader(`{"prompt":"cors","max_tokens":2}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Origin", origin)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r.WithContext(auth.WithConn(context.Background(), auth.Conn{Class: auth.Public}))
	}
	tests := []struct {
		name       string
		h          http.Handler
		r          *http.Request
		code       int
		allow      string // Access-Control-Allow-Origin
		allowHdrs  bool   // Allow-Methods and Allow-Headers present
		notAllowed bool
	}{
		{name: "off: preflight reaches the mux, no CORS headers", h: off, r: preflight(page), code: 405},
		{name: "off: request answered, no CORS headers", h: off, r: serve(page, "tok-serve"), code: 200},
		{name: "on: preflight answered without credentials", h: on, r: preflight(page), code: 204, allow: page, allowHdrs: true},
		{name: "on: authenticated request carries the origin", h: on, r: serve(page, "tok-serve"), code: 200, allow: page},
		{name: "on: refusal carries the origin too", h: on, r: serve(page, ""), code: 401, allow: page},
		{name: "on: another origin's preflight gets no grant", h: on, r: preflight("https://evil.example"), code: 204},
		{name: "on: another origin's request gets no CORS header", h: on, r: serve("https://evil.example", "tok-serve"), code: 200},
		{name: "star: any origin", h: star, r: preflight("https://any.example"), code: 204, allow: "*", allowHdrs: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			tt.h.ServeHTTP(w, tt.r)
			h := w.Result().Header
			if w.Code != tt.code {
				t.Errorf("status %d, want %d: %s", w.Code, tt.code, w.Body.String())
			}
			if got := h.Get("Access-Control-Allow-Origin"); got != tt.allow {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tt.allow)
			}
			gotHdrs := h.Get("Access-Control-Allow-Methods") != "" && strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization")
			if gotHdrs != tt.allowHdrs {
				t.Errorf("allow methods/headers %v, want %v: %v", gotHdrs, tt.allowHdrs, h)
			}
			if h.Get("Access-Control-Allow-Credentials") != "" {
				t.Error("credentials mode offered")
			}
		})
	}
}

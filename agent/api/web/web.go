// Package web holds the daemon's live page: static files, no build step.
//
// The page at / shows each meter's power as a moving trace, the newest
// receipts with their provenance, error bound and µJ/token, and the
// backend table with configured against learned µJ/token. Everything it
// shows comes from the daemon's own JSON API (/v1/live, /v1/receipts,
// /v1/chain/head, /v1/backends, /v1/meters); it loads nothing from any
// other origin, so it works on a machine with no network but the daemon.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed index.html static
var files embed.FS

// CSP lets the page run only its own script and style and talk only to
// its own origin: no inline script, no eval, no third-party anything.
// img-src is for the favicon; the trace is drawn on a canvas.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file with what it is served as.
type asset struct {
	body        []byte
	contentType string
	etag        string
	// cache is the Cache-Control value. The index is never cached, so a
	// daemon upgrade is seen on the next load; the static files are
	// revalidated each time (cheap: a 304 by ETag), so the page and its
	// script never come from different builds.
	cache string
}

// routes maps each served path to its file and type. Types are set here
// rather than guessed from the extension, because the system's MIME table
// can map .js to something a browser under nosniff refuses.
var routes = map[string]struct{ file, contentType, cache string }{
	"/":                   {"index.html", "text/html; charset=utf-8", "no-store"},
	"/static/app.js":      {"static/app.js", "text/javascript; charset=utf-8", "no-cache"},
	"/static/style.css":   {"static/style.css", "text/css; charset=utf-8", "no-cache"},
	"/static/favicon.svg": {"static/favicon.svg", "image/svg+xml", "no-cache"},
}

// Handler serves the page at exactly / and its files under /static/;
// every other path is 404, so a mistyped API path is not answered with
// HTML. Mount it at "GET /": the API's own, more specific routes win.
func Handler() http.Handler {
	assets := make(map[string]asset, len(routes))
	for path, r := range routes {
		body, err := files.ReadFile(r.file)
		if err != nil {
			// The files are embedded at build time: a missing one is a
			// broken build, not a runtime condition.
			panic("web: " + err.Error())
		}
		sum := sha256.Sum256(body)
		assets[path] = asset{body: body, contentType: r.contentType, cache: r.cache,
			etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", a.cache)
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if a.cache != "no-store" {
			h.Set("ETag", a.etag)
		}
		// ServeContent answers HEAD, ranges and If-None-Match; a zero
		// modification time leaves Last-Modified out (the ETag decides).
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

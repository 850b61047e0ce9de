package llamaserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// sse writes server-sent events as llama-server does: each event is
// "data: <json>\n\n", flushed at once. The 200 and the event-stream
// headers go out with the first event, so an error found before it can
// still be answered with a status code.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func newSSE(w http.ResponseWriter) *sse { return &sse{w: w, rc: http.NewResponseController(w)} }

func (e *sse) start() {
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
		e.w.WriteHeader(http.StatusOK)
	}
}

// send writes one event carrying v as JSON.
func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return e.raw(b)
}

func (e *sse) raw(b []byte) error {
	e.start()
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		return fmt.Errorf("write event: %w", err)
	}
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("flush event: %w", err)
	}
	return nil
}

// done ends an OpenAI-style stream.
func (e *sse) done() error { return e.raw([]byte("[DONE]")) }

// fail reports err: as an HTTP error if nothing was sent yet, else as an
// error event, as llama-server does mid-stream.
func (e *sse) fail(err error) {
	if !e.started {
		writeErr(e.w, err)
		return
	}
	var re *requestError
	ae := apiError{Code: http.StatusInternalServerError, Type: "server_error", Message: err.Error()}
	if errors.As(err, &re) {
		ae = re.apiError
	}
	e.send(map[string]apiError{"error": ae})
}

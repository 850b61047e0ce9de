package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"meshd/agent"
	"meshd/engine"
)

// TestCapabilityStatus: an engine that cannot do what was asked (no chat
// template, no stop, no embedding) is the caller's 400 naming the field,
// never the 502 a client retries; an engine that failed stays a 502.
func TestCapabilityStatus(t *testing.T) {
	wrap := func(err error) error {
		return &agent.ServeError{Err: fmt.Errorf("serve x on g: %w", fmt.Errorf("serve: %w: /apply-template answered HTTP 501", err))}
	}
	for _, tc := range []struct {
		err         error
		status      int
		code, param string
	}{
		{wrap(engine.ErrNoChat), http.StatusBadRequest, "chat_unsupported", "messages"},
		{wrap(engine.ErrNoStop), http.StatusBadRequest, "unsupported_field", "stop"},
		{wrap(engine.ErrNoEmbed), http.StatusBadRequest, "wrong_backend_kind", "model"},
		{wrap(errors.New("decode failed")), http.StatusBadGateway, "engine_failed", ""},
	} {
		status, e := serveStatus(tc.err)
		if status != tc.status || e.Code != tc.code || e.Param != tc.param {
			t.Errorf("%v: %d %+v, want %d code %s param %s", tc.err, status, e, tc.status, tc.code, tc.param)
		}
	}
}

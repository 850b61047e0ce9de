package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// ErrCutByDrain is wrapped when a serve in flight is cancelled because
// the daemon's drain reached its deadline (Server.Cut): the caller gets a
// 503 naming it, nothing is sealed for tokens it never received, and a
// grant's hold is released.
var ErrCutByDrain = errors.New("meshd is shutting down: the serve was cut at the drain deadline")

// cutter cancels every serve in flight at once.
type cutter struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newCutter() cutter {
	ctx, cancel := context.WithCancelCause(context.Background())
	return cutter{ctx: ctx, cancel: cancel}
}

// Cut cancels every serve in flight, each answering 503 shutting_down;
// serves admitted later are cut at once. The daemon calls it when its
// drain nears shutdown_timeout, so that a long serve ends with a clean
// answer instead of a cut connection. Idempotent.
func (s *Server) Cut() { s.cut.cancel(ErrCutByDrain) }

// cutContext is ctx, also cancelled by Cut; stop releases it.
func (s *Server) cutContext(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.cut.ctx, func() { cancel(ErrCutByDrain) })
	return ctx, func() { stop(); cancel(nil) }
}

// cutErr marks err as the drain's doing when Cut ended ctx.
func cutErr(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), ErrCutByDrain) {
		return fmt.Errorf("%w: %w", ErrCutByDrain, err)
	}
	return err
}

// drainStatus is serveStatus for a serve Cut ended.
func drainStatus(err error, e apiError) (int, apiError, bool) {
	if !errors.Is(err, ErrCutByDrain) {
		return 0, e, false
	}
	e.Code, e.Type = "shutting_down", "server_error"
	return http.StatusServiceUnavailable, e, true
}

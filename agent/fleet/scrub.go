package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// redacted replaces a secret wherever it would have been logged.
const redacted = "[redacted]"

// Scrub returns a logger that replaces every occurrence of the given
// secrets in a record's message and attributes with [redacted]. The
// connection options never log a password themselves; this is the second
// line, for the text of errors from libraries that might quote one.
func Scrub(log *slog.Logger, secrets ...string) *slog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var s []string
	for _, x := range secrets {
		if x != "" {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return log
	}
	return slog.New(&scrubHandler{next: log.Handler(), secrets: s})
}

type scrubHandler struct {
	next    slog.Handler
	secrets []string
}

func (h *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, scrub(r.Message, h.secrets), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = h.attr(a)
	}
	return &scrubHandler{next: h.next.WithAttrs(clean), secrets: h.secrets}
}

func (h *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{next: h.next.WithGroup(name), secrets: h.secrets}
}

// attr renders anything that is not a plain number or time to text, so
// that an error or a struct cannot carry a secret past the scrub.
func (h *scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, x := range g {
			clean[i] = h.attr(x)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindString:
		return slog.String(a.Key, scrub(v.String(), h.secrets))
	case slog.KindAny:
		return slog.String(a.Key, scrub(fmt.Sprint(v.Any()), h.secrets))
	default:
		return slog.Attr{Key: a.Key, Value: v}
	}
}

func scrub(s string, secrets []string) string {
	for _, x := range secrets {
		if x != "" {
			s = strings.ReplaceAll(s, x, redacted)
		}
	}
	return s
}

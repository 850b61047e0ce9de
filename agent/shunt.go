package agent

import (
	"context"
	"fmt"

	"meshd/shunt"
)

// spanMeter lets a span of samplers meter the agent's windows.
type spanMeter struct{ s *shunt.Span }

// FromSpan returns a Meter backed by a span of running samplers.
func FromSpan(s *shunt.Span) Meter { return spanMeter{s} }

// FromShunt returns a Meter backed by one running sampler, metering one
// serve at a time.
func FromShunt(m *shunt.Meter) (Meter, error) {
	s, err := shunt.NewSpan([]shunt.Member{m}, shunt.SpanConfig{})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return spanMeter{s}, nil
}

func (s spanMeter) Name() string      { return s.s.Name() }
func (s spanMeter) Health() error     { return s.s.Health() }
func (s spanMeter) Span() *shunt.Span { return s.s }

func (s spanMeter) Open(ctx context.Context) (Window, error) {
	w, err := s.s.Open(ctx)
	if err != nil {
		// Return a true nil so the agent never closes a nil *SpanWindow.
		return nil, err
	}
	return w, nil
}

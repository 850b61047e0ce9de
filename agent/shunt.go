package agent

import (
	"context"

	"meshd/shunt"
)

// shuntMeter lets a sampler meter the agent's windows.
type shuntMeter struct{ m *shunt.Meter }

// FromShunt returns a Meter backed by a running shunt sampler.
func FromShunt(m *shunt.Meter) Meter { return shuntMeter{m} }

func (s shuntMeter) Name() string { return s.m.Name() }

func (s shuntMeter) Open(ctx context.Context) (Window, error) {
	w, err := s.m.Open(ctx)
	if err != nil {
		// Return a true nil so the agent never closes a nil *shunt.Window.
		return nil, err
	}
	return w, nil
}

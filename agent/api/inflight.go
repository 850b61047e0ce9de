package api

import (
	"sync"
	"time"
)

// startSet holds the start times of the serves in flight, so the watchdog
// can tell a busy server from a stalled one.
type startSet struct {
	mu   sync.Mutex
	next uint64
	at   map[uint64]time.Time
}

func newStartSet() *startSet { return &startSet{at: map[uint64]time.Time{}} }

func (s *startSet) add(t time.Time) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.at[s.next] = t
	return s.next
}

func (s *startSet) remove(tok uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, tok)
}

// oldest is the earliest start among the serves in flight.
func (s *startSet) oldest() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, t := range s.at {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}

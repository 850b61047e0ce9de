package agent

import (
	"fmt"
	"sort"
	"sync"

	"meshd/wire"
)

// learnWindow is how many recent measured receipts a backend's learned
// µJ/token is the median of, and learnMin how many it needs before the
// router trusts it over the configured figure.
const (
	learnWindow = 15
	learnMin    = 3
)

// costs follows each backend's measured µJ per token (input plus output)
// from its sealed receipts. The median of recent figures is robust to one
// odd serve (a cold cache, a stalled meter) in a way a mean is not.
type costs struct {
	mu  sync.Mutex
	obs map[string][]uint64 // ring of recent figures per backend
	pos map[string]int
}

func newCosts() *costs { return &costs{obs: map[string][]uint64{}, pos: map[string]int{}} }

// observe records a sealed serve's figure. Estimator receipts carry the
// configured model back to itself, so they teach nothing and are skipped.
func (c *costs) observe(backend string, p wire.Provenance, chargedUJ uint64, tokens uint64) {
	if p == wire.Estimator || tokens == 0 {
		return
	}
	per := chargedUJ / tokens
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.obs[backend]
	if len(o) < learnWindow {
		c.obs[backend] = append(o, per)
		return
	}
	o[c.pos[backend]] = per
	c.pos[backend] = (c.pos[backend] + 1) % learnWindow
}

// cost is the µJ/token the router should use for backend and a note for
// the route justification saying where it came from.
func (c *costs) cost(backend string, configured uint64) (uint64, string) {
	c.mu.Lock()
	o := append([]uint64(nil), c.obs[backend]...)
	c.mu.Unlock()
	if len(o) < learnMin {
		return configured, fmt.Sprintf("configured %d µJ/token", configured)
	}
	sort.Slice(o, func(i, j int) bool { return o[i] < o[j] })
	med := o[len(o)/2]
	if len(o)%2 == 0 {
		med = o[len(o)/2-1]/2 + o[len(o)/2]/2 + (o[len(o)/2-1]%2+o[len(o)/2]%2)/2
	}
	return med, fmt.Sprintf("learned %d µJ/token (median of %d measured receipts)", med, len(o))
}

// learned says whether backend's cost comes from its receipts.
func (c *costs) learned(backend string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.obs[backend]) >= learnMin
}

// Package agent runs the serve lifecycle of mesh/1 §2: it routes a request
// to the cheapest sufficient backend (§4), meters the engine's span, and
// hands the outcome and energy to the steward to seal.
package agent

package wire

import (
	"fmt"
	"strconv"
	"strings"
)

// Fidelity is the ordered quality scale F0 (coarsest) … F4 (frontier).
type Fidelity uint8

// The five fidelity levels of mesh/1 §3.2.
const (
	F0 Fidelity = iota
	F1
	F2
	F3
	F4
)

// MaxFidelity is the highest level defined by mesh/1.
const MaxFidelity = F4

// Valid reports whether f is one of F0..F4.
func (f Fidelity) Valid() bool { return f <= MaxFidelity }

func (f Fidelity) String() string {
	if !f.Valid() {
		return fmt.Sprintf("Fidelity(%d)", uint8(f))
	}
	return "F" + strconv.Itoa(int(f))
}

// ParseFidelity accepts "F0".."F4" (case-insensitive) or a bare "0".."4".
func ParseFidelity(s string) (Fidelity, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(s), "F"), "f")
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 || n > int(MaxFidelity) {
		return 0, fmt.Errorf("fidelity %q: must be one of F0..F4", s)
	}
	return Fidelity(n), nil
}

// FidelityFromUint checks a wire integer against the scale.
func FidelityFromUint(n uint64) (Fidelity, error) {
	if n > uint64(MaxFidelity) {
		return 0, fmt.Errorf("fidelity %d: outside F0..F4", n)
	}
	return Fidelity(n), nil
}

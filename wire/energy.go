package wire

import (
	"errors"
	"fmt"
)

// Provenance says where an energy figure came from (mesh/1 §3.3).
// The zero value is deliberately invalid so that an Energy nobody filled in
// can never be sealed.
type Provenance uint8

// Provenance values. Their wire names are the String forms.
const (
	provenanceUnset Provenance = iota
	HwShunt
	ModelBased
	Estimator
)

func (p Provenance) String() string {
	switch p {
	case HwShunt:
		return "HwShunt"
	case ModelBased:
		return "ModelBased"
	case Estimator:
		return "Estimator"
	}
	return fmt.Sprintf("Provenance(%d)", uint8(p))
}

// Valid reports whether p is one of the three defined provenances.
func (p Provenance) Valid() bool { return p >= HwShunt && p <= Estimator }

// ParseProvenance maps a wire name back to a Provenance.
func ParseProvenance(s string) (Provenance, error) {
	switch s {
	case "HwShunt":
		return HwShunt, nil
	case "ModelBased":
		return ModelBased, nil
	case "Estimator":
		return Estimator, nil
	}
	return 0, fmt.Errorf("energy provenance %q: must be HwShunt, ModelBased or Estimator", s)
}

// ErrCoupling is wrapped by every violation of the §3.3 coupling.
var ErrCoupling = errors.New("energy provenance coupling violated")

// Energy is the two-part integer-microjoule record of mesh/1 §3.3. Its
// fields are unexported: the only ways to obtain one are the constructors,
// which enforce the coupling, so an Energy that violates it cannot exist
// (other than the zero value, which Validate rejects).
type Energy struct {
	measured    uint64
	hasMeasured bool
	estimated   uint64
	provenance  Provenance
}

// NewEnergy builds an Energy, refusing any combination that breaks the
// coupling: HwShunt needs a measurement, Estimator must not have one.
func NewEnergy(measuredUJ *uint64, estimatedUJ uint64, p Provenance) (Energy, error) {
	e := Energy{estimated: estimatedUJ, provenance: p}
	if measuredUJ != nil {
		e.measured, e.hasMeasured = *measuredUJ, true
	}
	if err := e.Validate(); err != nil {
		return Energy{}, err
	}
	return e, nil
}

// Measured is an HwShunt energy: a hardware reading plus the estimate made
// before the serve.
func Measured(measuredUJ, estimatedUJ uint64) Energy {
	return Energy{measured: measuredUJ, hasMeasured: true, estimated: estimatedUJ, provenance: HwShunt}
}

// Estimated is an Estimator energy: no measurement is implied.
func Estimated(estimatedUJ uint64) Energy {
	return Energy{estimated: estimatedUJ, provenance: Estimator}
}

// Modelled is a ModelBased energy, with or without a (partial) reading.
func Modelled(measuredUJ *uint64, estimatedUJ uint64) Energy {
	e, _ := NewEnergy(measuredUJ, estimatedUJ, ModelBased) // ModelBased accepts both forms
	return e
}

// Validate checks the coupling. It is called again by the steward at seal
// time; it is the last line of defence for the zero value.
func (e Energy) Validate() error {
	switch e.provenance {
	case HwShunt:
		if !e.hasMeasured {
			return fmt.Errorf("%w: HwShunt requires measured_uj", ErrCoupling)
		}
	case Estimator:
		if e.hasMeasured {
			return fmt.Errorf("%w: Estimator must not carry measured_uj", ErrCoupling)
		}
	case ModelBased:
	default:
		return fmt.Errorf("%w: provenance %v is not HwShunt, ModelBased or Estimator", ErrCoupling, e.provenance)
	}
	return nil
}

// MeasuredUJ returns the hardware reading and whether there is one.
func (e Energy) MeasuredUJ() (uint64, bool) { return e.measured, e.hasMeasured }

// EstimatedUJ returns the estimate, always present.
func (e Energy) EstimatedUJ() uint64 { return e.estimated }

// Provenance returns the provenance tag.
func (e Energy) Provenance() Provenance { return e.provenance }

// UJ is the figure a receipt charges: the measurement if present, else the
// estimate (mesh/1 §6.2).
func (e Energy) UJ() uint64 {
	if e.hasMeasured {
		return e.measured
	}
	return e.estimated
}

func (e Energy) String() string {
	if e.hasMeasured {
		return fmt.Sprintf("%s measured=%dµJ estimated=%dµJ", e.provenance, e.measured, e.estimated)
	}
	return fmt.Sprintf("%s estimated=%dµJ", e.provenance, e.estimated)
}

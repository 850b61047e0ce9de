package drivers

import (
	"math"
	"testing"
	"time"

	"periph.io/x/conn/v3/physic"
)

func TestPowerOfAndEnergyOf(t *testing.T) {
	for _, c := range []struct {
		e  physic.Energy
		dt time.Duration
		p  physic.Power
	}{
		{physic.Joule, time.Second, physic.Watt},
		{3 * physic.NanoJoule, 2 * time.Second, 2 * physic.NanoWatt}, // 1.5 nW rounds half up
		{physic.Energy(math.MaxInt64), time.Nanosecond, physic.Power(math.MaxInt64)},
		{physic.Joule, 0, 0},
		{-physic.Joule, time.Second, 0},
		{1200 * physic.MilliJoule, 100 * time.Millisecond, 12 * physic.Watt},
	} {
		if got := PowerOf(c.e, c.dt); got != c.p {
			t.Errorf("PowerOf(%v, %v) = %v, want %v", c.e, c.dt, got, c.p)
		}
	}
	for _, c := range []struct {
		p  physic.Power
		dt time.Duration
		e  physic.Energy
	}{
		{physic.Watt, time.Second, physic.Joule},
		{3 * physic.NanoWatt, 500 * time.Millisecond, physic.NanoJoule}, // 1.5 nJ truncates
		{physic.Power(math.MaxInt64), time.Hour, physic.Energy(math.MaxInt64)},
		{-physic.Watt, time.Second, 0},
		{12 * physic.Watt, 100 * time.Millisecond, 1200 * physic.MilliJoule},
	} {
		if got := EnergyOf(c.p, c.dt); got != c.e {
			t.Errorf("EnergyOf(%v, %v) = %v, want %v", c.p, c.dt, got, c.e)
		}
	}
}

package hwmon

import (
	"math"
	"time"

	"meshd/drivers"

	"periph.io/x/conn/v3/physic"
)

// chip is what the driver knows of one hwmon chip name: its datasheet error
// budget, its ranges, and how the kernel scales its registers into sysfs.
// The scaling matters because the sysfs value, not the chip's register, is
// what the driver reads: its resolution is the kernel's LSB.
type chip struct {
	// gain is the worst-case relative error of the power (or energy)
	// figure: shunt and bus gain errors, or the datasheet's total error
	// where it states one.
	gain float64
	// vos is the shunt input offset (max).
	vos physic.ElectricPotential
	// shuntFS is the shunt full-scale drop under the kernel's setup.
	shuntFS physic.ElectricPotential
	// busOff is the bus offset (max); busLSB the bus ADC step.
	busOff, busLSB physic.ElectricPotential
	// busMax is the highest bus voltage the chip measures.
	busMax physic.ElectricPotential
	// shuntInMicro: the shunt attribute (in0_input, in4..6_input) is in
	// µV rather than hwmon's mV (ina3221).
	shuntInMicro bool
	// scale derives the kernel's LSBs from the shunt resistance.
	scale func(shuntMicroOhms int64) lsbs
	// fixedShunt is the integrated shunt in µΩ; 0 reads the resistor from
	// sysfs or Options.
	fixedShunt int64
	// shuntAttr: the kernel publishes the shunt resistor in sysfs.
	shuntAttr bool
	// conv is the conversion period under the kernel's default
	// configuration, used where the chip publishes no update_interval.
	conv time.Duration
	// deadNum/deadDen is the fraction of each conversion period the
	// shunt goes unobserved (the bus and temperature slots of a
	// multiplexed ADC), for energy counters that integrate per conversion.
	deadNum, deadDen int64
	// energy: the chip has a hardware energy accumulator that the kernel
	// publishes as energy1_input, energyBits wide before scaling.
	energy     bool
	energyBits uint
}

// lsbs are the kernel's sysfs resolutions for one shunt resistance.
type lsbs struct {
	// current is the current register's step; currentRound is added
	// where sysfs rounds current to whole mA and the driver computes
	// V × I from it (ina3221).
	current, currentRound physic.ElectricCurrent
	// power is the power register's step in power1_input; 0 where the
	// chip has no power register.
	power physic.Power
	// energy is energy1_input's step; 0 without an accumulator.
	energy physic.Energy
	// roundErr is the relative error the kernel makes by rounding its
	// LSBs to whole µA and µW: it multiplies register counts by the
	// rounded step where the chip's true step is exact.
	roundErr float64
}

// ina2xxScale is the kernel's ina2xx.c scaling since it fixed the
// calibration register (2048 on the INA226, 4096 on the INA219) so that the
// current register equals the shunt register: current_lsb_uA =
// DIV_ROUND_CLOSEST(10^9 / shunt_div, R_µΩ), power_lsb_uW = power_lsb_factor
// × current_lsb_uA. The rounding to whole µA is the kernel's, and the
// driver carries its error (lsbs.roundErr).
func ina2xxScale(shuntDiv, powerFactor int64) func(int64) lsbs {
	return func(r int64) lsbs {
		exact := float64(1_000_000_000/shuntDiv) / float64(r)
		cur := divRound(1_000_000_000/shuntDiv, r)
		return lsbs{
			current:  physic.ElectricCurrent(cur) * physic.MicroAmpere,
			power:    physic.Power(powerFactor*cur) * physic.MicroWatt,
			roundErr: math.Abs(float64(cur)-exact) / exact,
		}
	}
}

// ina238Scale is the kernel's ina238.c scaling (SHUNT_CAL fixed at 4096
// for a 5 mΩ reference, shunt gain 4 unless the device tree says
// otherwise): current_lsb_uA = DIV_ROUND_CLOSEST(250 × 5000 × gain, R_µΩ),
// power_lsb_uW = DIV_ROUND_CLOSEST(current_lsb_uA × factor, 100),
// energy_lsb_uJ = 16 × power_lsb_uW. currentDiv is 16 where the current
// field is 20 bits (ina228) and the kernel divides the LSB accordingly.
// sysfs does not show the gain; a device tree that sets it to 1 makes the
// true steps and range smaller than these, so the budget stays an upper
// bound.
func ina238Scale(factor, currentDiv int64) func(int64) lsbs {
	return func(r int64) lsbs {
		const gain = 4
		cur := divRound(250*5000*gain, r)
		pow := divRound(cur*factor, 100)
		exact := float64(250*5000*gain) / float64(r) * float64(factor) / 100
		return lsbs{
			current:  (physic.ElectricCurrent(cur)*physic.MicroAmpere + physic.ElectricCurrent(currentDiv-1)) / physic.ElectricCurrent(currentDiv),
			power:    physic.Power(pow) * physic.MicroWatt,
			energy:   physic.Energy(16*pow) * physic.MicroJoule,
			roundErr: math.Abs(float64(pow)-exact) / exact,
		}
	}
}

// ina3221Scale: the kernel has no power attribute for the INA3221, and
// reports current as DIV_ROUND_CLOSEST(shunt_reg × 40000 nV, R_µΩ) mA, so
// V × I carries the 40 µV ADC step and a further half mA of rounding.
func ina3221Scale(r int64) lsbs {
	return lsbs{
		current:      currentOf(40*physic.MicroVolt, r),
		currentRound: 500 * physic.MicroAmpere,
	}
}

// chips lists the hwmon names the driver understands, with figures from the
// TI datasheets (maximum values) and the kernel drivers ina2xx.c,
// ina3221.c and ina238.c. A chip not listed is not opened: without its
// error budget and scaling the driver could not state what a reading is
// worth.
var chips = map[string]chip{
	// INA219 (SBOS448): PGA /8 (±320 mV) as the kernel configures it
	// (0x399F), 12-bit conversions of 532 µs each.
	"ina219": ina219Chip,
	"ina220": ina219Chip,
	// INA226 (SBOS547): Vos 10 µV, shunt and bus gain 0.1 % each, bus
	// offset 7.5 mV; the kernel's default 0x4527 is 16 × (1.1 + 1.1) ms,
	// published as update_interval.
	"ina226": ina226Chip,
	// INA230/INA231: INA226 register set; their larger offset (50 µV) and
	// a conservative 30 mV bus offset.
	"ina230": ina230Chip,
	"ina231": ina230Chip,
	// INA260: the INA226 core with an integrated 2 mΩ shunt; the kernel
	// reports 1.25 mA and 10 mW steps. Full scale is the current
	// register's 40.96 A, beyond the 15 A rating, since that is what
	// the chip can report.
	"ina260": {
		gain: 0.003, vos: 10 * physic.MicroVolt, shuntFS: 81920 * physic.MicroVolt,
		busOff: 7500 * physic.MicroVolt, busLSB: 1250 * physic.MicroVolt, busMax: 36 * physic.Volt,
		scale:      ina2xxScale(400, 8),
		fixedShunt: 2000,
		conv:       35 * time.Millisecond,
	},
	// INA3221 (SBOS576): Vos 80 µV, shunt and bus gain 0.25 % each, bus
	// offset 16 mV, 40 µV and 8 mV steps, ±163.8 mV, 26 V.
	"ina3221": {
		gain: 0.005, vos: 80 * physic.MicroVolt, shuntFS: 163800 * physic.MicroVolt,
		busOff: 16 * physic.MilliVolt, busLSB: 8 * physic.MilliVolt, busMax: 26 * physic.Volt,
		shuntInMicro: true,
		scale:        ina3221Scale,
		shuntAttr:    true,
		conv:         7 * time.Millisecond, // 3 channels × (1.1 + 1.1) ms at 0x7127
	},
	// INA238: Vos 5 µV, bus offset 5 mV, total power error 0.7 %,
	// ADCRANGE 0 (±163.84 mV); the INA237 is its 0.1 %-class sibling,
	// taken with 50 µV, 20 mV and 1 %. The kernel programs 16 × 1052 µs
	// conversions of bus, shunt and temperature (0xFB6A) and publishes
	// neither update_interval nor the shunt resistor.
	"ina237": ina237Chip,
	"ina238": ina238Chip,
	// INA228: 20-bit, Vos 1 µV, energy and charge accuracy 1.0 % of
	// full scale, a 40-bit energy accumulator published as energy1_input
	// in µJ. Bus offset taken as the INA238's 5 mV.
	"ina228": {
		gain: 0.01, vos: physic.MicroVolt, shuntFS: 163840 * physic.MicroVolt,
		busOff: 5 * physic.MilliVolt, busLSB: 195313 * physic.NanoVolt, busMax: 85 * physic.Volt,
		scale:   ina238Scale(20, 16),
		conv:    ina238Conv,
		deadNum: 2, deadDen: 3,
		energy: true, energyBits: 40,
	},
}

// ina238Conv is one averaged result under the kernel's ADC_CONFIG 0xFB6A:
// 16 averages of bus, shunt and temperature conversions of 1052 µs each.
const ina238Conv = 16 * 3 * 1052 * time.Microsecond

var (
	ina219Chip = chip{
		gain: 0.01, vos: 100 * physic.MicroVolt, shuntFS: 320 * physic.MilliVolt,
		busOff: 4 * physic.MilliVolt, busLSB: 4 * physic.MilliVolt, busMax: 32 * physic.Volt,
		scale:     ina2xxScale(100, 20),
		shuntAttr: true,
		conv:      1064 * time.Microsecond,
	}
	ina226Chip = chip{
		gain: 0.002, vos: 10 * physic.MicroVolt, shuntFS: 81920 * physic.MicroVolt,
		busOff: 7500 * physic.MicroVolt, busLSB: 1250 * physic.MicroVolt, busMax: 36 * physic.Volt,
		scale:     ina2xxScale(400, 25),
		shuntAttr: true,
		conv:      35 * time.Millisecond,
	}
	ina230Chip = func() chip {
		c := ina226Chip
		c.vos, c.busOff, c.busMax = 50*physic.MicroVolt, 30*physic.MilliVolt, 28*physic.Volt
		return c
	}()
	ina238Chip = chip{
		gain: 0.007, vos: 5 * physic.MicroVolt, shuntFS: 163840 * physic.MicroVolt,
		busOff: 5 * physic.MilliVolt, busLSB: 3125 * physic.MicroVolt, busMax: 85 * physic.Volt,
		scale: ina238Scale(20, 1),
		conv:  ina238Conv,
	}
	ina237Chip = func() chip {
		c := ina238Chip
		c.gain, c.vos, c.busOff = 0.01, 50*physic.MicroVolt, 20*physic.MilliVolt
		return c
	}()
)

// divRound is the kernel's DIV_ROUND_CLOSEST for positive operands.
func divRound(n, d int64) int64 { return (n + d/2) / d }

// currentOf is v / R with R in µΩ, rounded up to the nanoampere so that
// a bound built from it never shrinks.
func currentOf(v physic.ElectricPotential, shuntMicroOhms int64) physic.ElectricCurrent {
	return physic.ElectricCurrent((int64(v)*1_000_000 + shuntMicroOhms - 1) / shuntMicroOhms)
}

// power is v × i in nW, rounded away from zero so that a bound built from
// it never shrinks; it saturates rather than overflows.
func power(v physic.ElectricPotential, i physic.ElectricCurrent) physic.Power {
	p := math.Abs(float64(v)) * math.Abs(float64(i)) / 1e9
	if p >= math.MaxInt64 {
		return math.MaxInt64
	}
	return physic.Power(math.Ceil(p))
}

// accuracy is the error budget of rail r of chip c with shunt resistance
// r µΩ. maxPower, when positive, replaces the computed full scale.
//
// Offset at bus voltage V, all terms worst case:
//   - the shunt offset and one current step as power: |V| × (Vos/R + I_LSB),
//     with I_LSB as the kernel scales it (for the INA226: 2.5 µV / R, the
//     kernel's current LSB since it fixes CAL at 2048);
//   - one step of the chip's power register as the kernel scales it
//     (INA226: 25 × I_LSB), or where the driver computes V × I from
//     sysfs, the kernel's rounding of current to whole mA;
//   - the bus offset and one bus step times the full-scale current: the
//     contract's Offset sees only V, and bus error × I is largest there.
//
// FullScale at V is the shunt full scale over R times |V|.
func accuracy(c chip, r int64, maxPower physic.Power) drivers.Accuracy {
	l := c.scale(r)
	ifs := currentOf(c.shuntFS, r)
	busTerm := power(c.busOff+c.busLSB, ifs)
	inTerm := currentOf(c.vos, r) + l.current + l.currentRound
	fullScale := func(v physic.ElectricPotential) physic.Power { return power(v, ifs) }
	if maxPower > 0 {
		fullScale = func(physic.ElectricPotential) physic.Power { return maxPower }
	}
	busErr := c.busOff + c.busLSB
	gain := c.gain + l.roundErr
	return drivers.Accuracy{
		GainErr: gain,
		Offset: func(v physic.ElectricPotential) physic.Power {
			return power(v, inTerm) + l.power + busTerm
		},
		// The bus error times the current that can have flowed given the
		// reading: |I| stretched by the gain error, plus the current's own
		// offset terms.
		OffsetAt: func(v physic.ElectricPotential, i physic.ElectricCurrent) physic.Power {
			ia := i
			if ia < 0 {
				ia = -ia
			}
			most := physic.ElectricCurrent(math.Ceil(float64(ia)*(1+gain))) + inTerm
			return power(v, inTerm) + l.power + power(busErr, most)
		},
		// Two readings a, b of the chip: V_r = (1+g_b)V + o_b + q_b,
		// I_r = (1+g_s)I + o_I + q_I, p_r = V_r I_r + q_p, with the gains
		// g and offsets o the chip's (common to both) and the steps q
		// each reading's own. Then p_r = (1+g_b)(1+g_s)p + ε with
		// ε = (1+g_s)(o_b + q_b)I + V_r(o_I + q_I) + q_p, and
		// ε_b − ε_a = (1+g_s)[o_b ΔI + q_b,b I_b − q_b,a I_a]
		//             + o_I ΔV_r + q_I,b V_r,b − q_I,a V_r,a + Δq_p,
		// the true I and ΔI bounded from the readings over 1 − g.
		PairErr: func(a, b drivers.Sample) physic.Power {
			g, ob, qb := gain, math.Abs(float64(c.busOff)), math.Abs(float64(c.busLSB))
			oi, qi := math.Abs(float64(currentOf(c.vos, r))), math.Abs(float64(l.current+l.currentRound))
			ia, ib := math.Abs(float64(a.Current)), math.Abs(float64(b.Current))
			va, vb := math.Abs(float64(a.Bus)), math.Abs(float64(b.Bus))
			di, dv := math.Abs(float64(b.Current-a.Current)), math.Abs(float64(b.Bus-a.Bus))
			busSide := (1 + g) / (1 - g) * (ob*(di+2*qi) + qb*(ia+ib+2*(oi+qi)))
			shuntSide := oi*dv + qi*(va+vb)
			nw := (busSide+shuntSide)/1e9 + 2*float64(l.power)
			if nw >= math.MaxInt64 {
				return math.MaxInt64
			}
			return physic.Power(math.Ceil(nw))
		},
		FullScale: fullScale,
		MaxPower:  fullScale(c.busMax),
		Quantum:   l.energy,
	}
}

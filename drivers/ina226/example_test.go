package ina226_test

import (
	"context"
	"fmt"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/ina226"
	"meshd/drivers/inasim"

	"periph.io/x/conn/v3/physic"
)

// Example opens an INA226 on a simulated 400 kHz bus drawing 10 A at
// 11.98 V (the datasheet's worked example) and reads three conversions:
// each is placed in time with its uncertainty, and the second and third
// chain onto the one before.
func Example() {
	clock := drivertest.NewClock(drivertest.Epoch, true)
	bus := inasim.NewBus("i2c-1", clock)
	chip := bus.Add(inasim.INA226, 0x40)
	chip.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt)

	dev, err := ina226.Open(bus, 0x40, ina226.Config{
		ShuntMicroOhms:     2000,
		MaxCurrentUA:       15_000_000,
		CurrentLSBNanoAmps: 1_000_000,
		Preset:             ina226.PresetFast,
		Clock:              clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	info := dev.Info()
	fmt.Println(dev.Name(), info.Kind, info.Period, info.MaxPeriod)
	for range 3 {
		s, err := dev.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("[%v, %v] ±%v contiguous=%v dead=%v %v %v %v\n",
			s.Start.Sub(drivertest.Epoch).Round(time.Microsecond), s.End.Sub(drivertest.Epoch).Round(time.Microsecond),
			s.Uncertainty, s.Contiguous, s.Dead, s.Current, s.Bus, s.Power)
	}
	// Output:
	// ina226@i2c-1:0x40 adc 1.24ms 1.364ms
	// [383µs, 1.644ms] ±72.5µs contiguous=false dead=154µs 10A 11.980V 119.800W
	// [1.644ms, 2.905ms] ±72.5µs contiguous=true dead=154µs 10A 11.980V 119.800W
	// [2.905ms, 4.166ms] ±72.5µs contiguous=true dead=154µs 10A 11.980V 119.800W
}

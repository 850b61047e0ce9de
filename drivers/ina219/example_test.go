package ina219_test

import (
	"context"
	"fmt"
	"time"

	"meshd/drivers/drivertest"
	"meshd/drivers/ina219"
	"meshd/drivers/inasim"

	"periph.io/x/conn/v3/physic"
)

// Example opens an INA219 on a simulated bus drawing 10 A at 11.98 V (the
// datasheet's example board) and reads two conversions.
func Example() {
	clock := drivertest.NewClock(drivertest.Epoch, true)
	bus := inasim.NewBus("i2c-1", clock)
	chip := bus.Add(inasim.INA219, 0x40)
	chip.SetInputs(20*physic.MilliVolt, 11980*physic.MilliVolt)

	dev, err := ina219.Open(bus, 0x40, ina219.Config{
		ShuntMicroOhms:     2000,
		MaxCurrentUA:       10_000_000,
		CurrentLSBNanoAmps: 1_000_000,
		Clock:              clock,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	fmt.Println(dev.Name(), dev.Info().Period, dev.Info().MaxPeriod)
	for range 2 {
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
	// ina219@i2c-1:0x40 8.594ms 9.4534ms
	// [383µs, 9.12ms] ±132.5µs contiguous=false dead=92.4µs 10A 11.980V 119.800W
	// [9.12ms, 17.652ms] ±132.5µs contiguous=true dead=92.4µs 10A 11.980V 119.800W
}

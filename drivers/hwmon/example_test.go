package hwmon_test

import (
	"context"
	"fmt"
	"log"

	"meshd/drivers/drivertest"
	"meshd/drivers/hwmon"
)

// Example lists the rails of a Jetson-style tree and reads one: an hwmon
// power attribute is a point reading, never a hardware measurement of the
// time between reads.
func Example() {
	rails, err := hwmon.Discover("testdata/hwmon")
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rails {
		fmt.Println(r)
	}

	clk := drivertest.NewClock(drivertest.Epoch, true)
	s, err := hwmon.Open(rails[0], hwmon.Options{Clock: clk})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	info := s.Info()
	fmt.Println(s.Name(), info.Kind, "every", info.Period)
	smp, err := s.Next(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(smp.Bus, "×", smp.Current, "=", smp.Power, "at", smp.End.Sub(drivertest.Epoch))
	// Output:
	// hwmon1/ina3221:1(VDD_IN)
	// hwmon1/ina3221:2(VDD_CPU_GPU_CV)
	// hwmon1/ina3221:3(VDD_SOC)
	// hwmon2/ina226:1
	// hwmon3/ina228:1
	// device/ina219:1
	// hwmon:hwmon1/ina3221:1(VDD_IN) point every 4.752ms
	// 19.072V × 1.512A = 28.837W at 4.752ms
}

package probe_test

import (
	"context"
	"fmt"
	"log"

	"meshd/drivers/drivertest"
	"meshd/drivers/probe"
)

// Example lists the power rails of a sysfs tree with one reading each and
// the kind of reading each would give when metered.
func Example() {
	found, err := probe.Scan(context.Background(), probe.Options{
		HwmonRoot: "../hwmon/testdata/hwmon",
		Clock:     drivertest.NewClock(drivertest.Epoch, true),
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range found {
		fmt.Println(f)
	}
	// Output:
	// ina3221      hwmon:hwmon1/ina3221:1(VDD_IN) point   bus 19.072 V  shunt 7.560 mV  current 1.5120 A  power 28.8369 W  (power = V × I)
	// ina3221      hwmon:hwmon1/ina3221:2(VDD_CPU_GPU_CV) point   bus 19.064 V  shunt -1.240 mV  current -0.2480 A  power -4.7279 W  (power = V × I)
	// ina3221      hwmon:hwmon1/ina3221:3(VDD_SOC) point   bus 19.080 V  shunt 2.000 mV  current 0.4000 A  power 7.6320 W  (power = V × I)
	// ina226       hwmon:hwmon2/ina226:1        point   bus 11.980 V  shunt 20.000 mV  current 10.0000 A  power 119.7812 W
	// ina228       hwmon:hwmon3/ina228:1        counter bus 12.000 V  shunt 10.000 mV  current 2.0000 A  power 24.0000 W  (power from the energy counter when metered)
	// ina219       hwmon:device/ina219:1        point   bus 5.000 V  shunt 4.000 mV  current 0.4000 A  power 2.0000 W
}

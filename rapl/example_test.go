package rapl_test

import (
	"fmt"
	"os"

	"meshd/rapl"
)

// Discover the zones of a machine (here the Intel fixture tree) and open
// the package zone as the sampler would for "-meter rapl:package-0".
func Example() {
	cfg := rapl.Config{FS: os.DirFS("testdata/intel"), CPUInfo: "testdata/cpuinfo/intel"}
	zones, err := rapl.Discover(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, z := range zones {
		fmt.Printf("%-15s %-17s %s\n", z.ID, z.Key, z.Vendor)
	}
	s, err := rapl.Open("package-0", cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	in := s.Info()
	fmt.Printf("%s: kind %s, every %s, wrap-safe for %.0f s, full scale %s\n",
		s.Name(), in.Kind, in.Period, in.MaxPeriod.Seconds(), in.Accuracy.FullScale(0))
	// Output:
	// intel-rapl:0    package-0         intel
	// intel-rapl:0:0  package-0/core    intel
	// intel-rapl:0:1  package-0/uncore  intel
	// intel-rapl:0:2  package-0/dram    intel
	// intel-rapl:1    psys              intel
	// rapl:package-0: kind model, every 100ms, wrap-safe for 259 s, full scale 253W
}

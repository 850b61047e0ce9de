package nvml_test

import (
	"context"
	"fmt"

	"meshd/drivers/drivertest"
	gpu "meshd/drivers/nvml"
)

// Meter a GPU whose energy counter climbs 30 J every 100 ms (300 W), as
// "-meter nvml:0" would, with a fake of NVML's calls standing in for the driver.
func Example() {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	dev := &fakeGPU{
		GetNameFunc: func() (string, gpu.Return) { return "NVIDIA H200", gpu.Success },
		GetTotalEnergyConsumptionFunc: func() (uint64, gpu.Return) {
			ms := uint64(clk.Now().Sub(drivertest.Epoch).Milliseconds())
			return 1000000 + 300*ms, gpu.Success // mJ
		},
		GetEnforcedPowerLimitFunc: func() (uint32, gpu.Return) { return 700000, gpu.Success }, // mW
	}
	lib := &fakeLib{
		devs:                       []*fakeGPU{dev},
		InitFunc:                   func() gpu.Return { return gpu.Success },
		ShutdownFunc:               func() gpu.Return { return gpu.Success },
		DeviceGetCountFunc:         func() (int, gpu.Return) { return 1, gpu.Success },
		DeviceGetHandleByIndexFunc: func(int) (gpu.Device, gpu.Return) { return handleOf(0), gpu.Success },
	}
	s, err := gpu.New(lib, 0, gpu.Config{Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	in := s.Info()
	fmt.Printf("%s (%s): kind %s, quantum %s, full scale %s\n", s.Name(), s.GPU(), in.Kind, in.Accuracy.Quantum, in.Accuracy.FullScale(0))
	for range 3 {
		smp, err := s.Next(context.Background())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s over %s, contiguous %v\n", smp.Power, smp.End.Sub(smp.Start), smp.Contiguous)
	}
	// Output:
	// nvml:0 (NVIDIA H200): kind model, quantum 1mJ, full scale 700W
	// 300W over 100ms, contiguous false
	// 300W over 100ms, contiguous true
	// 300W over 100ms, contiguous true
}

//go:build cgo

package nvml_test

import (
	"context"
	"fmt"

	"meshd/drivers/drivertest"
	gpu "meshd/drivers/nvml"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// Meter a GPU whose energy counter climbs 30 J every 100 ms (300 W), as
// "-meter nvml:0" would, with NVML's own mock standing in for the driver.
func Example() {
	clk := drivertest.NewClock(drivertest.Epoch, true)
	dev := &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) {
			ms := uint64(clk.Now().Sub(drivertest.Epoch).Milliseconds())
			return 1000000 + 300*ms, nvml.SUCCESS // mJ
		},
		GetEnforcedPowerLimitFunc: func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }, // mW
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
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

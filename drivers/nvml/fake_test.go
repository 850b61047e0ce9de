package nvml_test

import (
	gpu "meshd/drivers/nvml"
)

// fakeLib is NVML at its call level: gpu.Library answered as the C
// library would, from functions the tests set. Handles are opaque
// values it hands out; a call with any other handle is an invalid
// argument, as in NVML, so a driver that mixes them up fails.
type fakeLib struct {
	InitFunc                   func() gpu.Return
	ShutdownFunc               func() gpu.Return
	DeviceGetCountFunc         func() (int, gpu.Return)
	DeviceGetHandleByIndexFunc func(int) (gpu.Device, gpu.Return)
	devs                       []*fakeGPU

	inits, shutdowns int
}

// fakeGPU is one GPU's answers.
type fakeGPU struct {
	GetNameFunc                   func() (string, gpu.Return)
	GetUUIDFunc                   func() (string, gpu.Return)
	GetTotalEnergyConsumptionFunc func() (uint64, gpu.Return)
	GetPowerUsageFunc             func() (uint32, gpu.Return)
	GetEnforcedPowerLimitFunc     func() (uint32, gpu.Return)
	GetPowerManagementLimitFunc   func() (uint32, gpu.Return)
}

// handleBase keeps fake handles away from small integers, so that an
// index passed where a handle belongs is caught.
const handleBase = 0x7f001000 // fits a 32-bit uintptr too

func handleOf(i int) gpu.Device { return gpu.Device(uintptr(handleBase) + uintptr(0x100*i)) }

func (l *fakeLib) Init() gpu.Return {
	l.inits++
	if l.InitFunc == nil {
		return gpu.ErrorFunctionNotFound
	}
	return l.InitFunc()
}

func (l *fakeLib) Shutdown() gpu.Return {
	l.shutdowns++
	if l.ShutdownFunc == nil {
		return gpu.ErrorFunctionNotFound
	}
	return l.ShutdownFunc()
}

func (l *fakeLib) DeviceGetCount() (int, gpu.Return) {
	if l.DeviceGetCountFunc == nil {
		return 0, gpu.ErrorFunctionNotFound
	}
	return l.DeviceGetCountFunc()
}

func (l *fakeLib) DeviceGetHandleByIndex(i int) (gpu.Device, gpu.Return) {
	if l.DeviceGetHandleByIndexFunc == nil {
		return 0, gpu.ErrorFunctionNotFound
	}
	return l.DeviceGetHandleByIndexFunc(i)
}

// dev resolves a handle to its GPU.
func (l *fakeLib) dev(d gpu.Device) *fakeGPU {
	for i, g := range l.devs {
		if handleOf(i) == d {
			return g
		}
	}
	return nil
}

func call[T any](l *fakeLib, d gpu.Device, pick func(*fakeGPU) func() (T, gpu.Return)) (T, gpu.Return) {
	var zero T
	g := l.dev(d)
	if g == nil {
		return zero, gpu.ErrorInvalidArgument
	}
	f := pick(g)
	if f == nil {
		return zero, gpu.ErrorFunctionNotFound
	}
	return f()
}

func (l *fakeLib) DeviceGetName(d gpu.Device) (string, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (string, gpu.Return) { return g.GetNameFunc })
}

func (l *fakeLib) DeviceGetUUID(d gpu.Device) (string, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (string, gpu.Return) { return g.GetUUIDFunc })
}

func (l *fakeLib) DeviceGetTotalEnergyConsumption(d gpu.Device) (uint64, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (uint64, gpu.Return) { return g.GetTotalEnergyConsumptionFunc })
}

func (l *fakeLib) DeviceGetPowerUsage(d gpu.Device) (uint32, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (uint32, gpu.Return) { return g.GetPowerUsageFunc })
}

func (l *fakeLib) DeviceGetEnforcedPowerLimit(d gpu.Device) (uint32, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (uint32, gpu.Return) { return g.GetEnforcedPowerLimitFunc })
}

func (l *fakeLib) DeviceGetPowerManagementLimit(d gpu.Device) (uint32, gpu.Return) {
	return call(l, d, func(g *fakeGPU) func() (uint32, gpu.Return) { return g.GetPowerManagementLimitFunc })
}

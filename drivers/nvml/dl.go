//go:build !nonvml

package nvml

import (
	"fmt"
	"strings"

	"meshd/drivers"

	"github.com/ebitengine/purego"
)

// Buffer sizes nvml.h asks for (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
// NVML_DEVICE_UUID_V2_BUFFER_SIZE), NUL included.
const (
	nameBufferSize = 96
	uuidBufferSize = 96
)

// dl is Library on libnvidia-ml loaded at run time with purego, which
// calls C without cgo: one binary, cgo or not, meters a GPU where the
// driver is installed. Each field is one C function as nvml.h declares
// it; a function the library lacks answers ErrorFunctionNotFound, as
// NVML's own loader does.
type dl struct {
	init       func() Return                          // nvmlReturn_t nvmlInit_v2(void)
	shutdown   func() Return                          // nvmlReturn_t nvmlShutdown(void)
	count      func(count *uint32) Return             // nvmlDeviceGetCount_v2(unsigned int *)
	handle     func(index uint32, dev *Device) Return // nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *)
	name       func(Device, *byte, uint32) Return     // nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int)
	uuid       func(Device, *byte, uint32) Return     // nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int)
	energy     func(Device, *uint64) Return           // nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t, unsigned long long *)
	power      func(Device, *uint32) Return           // nvmlDeviceGetPowerUsage(nvmlDevice_t, unsigned int *)
	enforced   func(Device, *uint32) Return           // nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t, unsigned int *)
	management func(Device, *uint32) Return           // nvmlDeviceGetPowerManagementLimit(nvmlDevice_t, unsigned int *)
}

// load opens the NVML library lib (a soname or a path) and binds the
// calls the driver makes. The library stays mapped for the life of the
// process: the loader counts opens of the same library as one mapping,
// and unmapping it would leave the bound functions pointing nowhere.
//
// Without the library the error wraps drivers.ErrNoDevice and says the
// NVIDIA driver is not installed; a library that is not NVML (no
// nvmlInit_v2) is refused the same way.
func load(lib string) (Library, error) {
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		if strings.Contains(err.Error(), "No such file") {
			return nil, fmt.Errorf("nvml: %s not found: the NVIDIA driver is not installed, or its library is not on the loader's path (%v): %w",
				lib, err, drivers.ErrNoDevice)
		}
		return nil, fmt.Errorf("nvml: cannot load %s: %v: %w", lib, err, drivers.ErrNoDevice)
	}
	if _, err := purego.Dlsym(h, "nvmlInit_v2"); err != nil {
		return nil, fmt.Errorf("nvml: %s is not NVML (no nvmlInit_v2): %w", lib, drivers.ErrNoDevice)
	}
	l := &dl{}
	for _, b := range []struct {
		sym string
		fn  any
	}{
		{"nvmlInit_v2", &l.init},
		{"nvmlShutdown", &l.shutdown},
		{"nvmlDeviceGetCount_v2", &l.count},
		{"nvmlDeviceGetHandleByIndex_v2", &l.handle},
		{"nvmlDeviceGetName", &l.name},
		{"nvmlDeviceGetUUID", &l.uuid},
		{"nvmlDeviceGetTotalEnergyConsumption", &l.energy},
		{"nvmlDeviceGetPowerUsage", &l.power},
		{"nvmlDeviceGetEnforcedPowerLimit", &l.enforced},
		{"nvmlDeviceGetPowerManagementLimit", &l.management},
	} {
		if addr, err := purego.Dlsym(h, b.sym); err == nil {
			purego.RegisterFunc(b.fn, addr)
		}
	}
	l.fillMissing()
	return l, nil
}

// fillMissing makes every function the library lacks answer
// ErrorFunctionNotFound.
func (l *dl) fillMissing() {
	nf := func() Return { return ErrorFunctionNotFound }
	if l.init == nil {
		l.init = nf
	}
	if l.shutdown == nil {
		l.shutdown = nf
	}
	if l.count == nil {
		l.count = func(*uint32) Return { return ErrorFunctionNotFound }
	}
	if l.handle == nil {
		l.handle = func(uint32, *Device) Return { return ErrorFunctionNotFound }
	}
	str := func(Device, *byte, uint32) Return { return ErrorFunctionNotFound }
	u32 := func(Device, *uint32) Return { return ErrorFunctionNotFound }
	for _, f := range []*func(Device, *byte, uint32) Return{&l.name, &l.uuid} {
		if *f == nil {
			*f = str
		}
	}
	for _, f := range []*func(Device, *uint32) Return{&l.power, &l.enforced, &l.management} {
		if *f == nil {
			*f = u32
		}
	}
	if l.energy == nil {
		l.energy = func(Device, *uint64) Return { return ErrorFunctionNotFound }
	}
}

func (l *dl) Init() Return     { return l.init() }
func (l *dl) Shutdown() Return { return l.shutdown() }

func (l *dl) DeviceGetCount() (int, Return) {
	var n uint32
	ret := l.count(&n)
	return int(n), ret
}

func (l *dl) DeviceGetHandleByIndex(index int) (Device, Return) {
	if index < 0 || uint64(index) > 1<<32-1 {
		return 0, ErrorInvalidArgument
	}
	var d Device
	ret := l.handle(uint32(index), &d)
	return d, ret
}

func (l *dl) DeviceGetName(d Device) (string, Return) { return cstring(l.name, d, nameBufferSize) }
func (l *dl) DeviceGetUUID(d Device) (string, Return) { return cstring(l.uuid, d, uuidBufferSize) }

func (l *dl) DeviceGetTotalEnergyConsumption(d Device) (uint64, Return) {
	var mj uint64
	ret := l.energy(d, &mj)
	return mj, ret
}

func (l *dl) DeviceGetPowerUsage(d Device) (uint32, Return)           { return u32(l.power, d) }
func (l *dl) DeviceGetEnforcedPowerLimit(d Device) (uint32, Return)   { return u32(l.enforced, d) }
func (l *dl) DeviceGetPowerManagementLimit(d Device) (uint32, Return) { return u32(l.management, d) }

func u32(f func(Device, *uint32) Return, d Device) (uint32, Return) {
	var v uint32
	ret := f(d, &v)
	return v, ret
}

// cstring calls a function that writes a NUL-terminated string into a
// buffer of size bytes and returns the string up to the NUL (all of the
// buffer if the library wrote none).
func cstring(f func(Device, *byte, uint32) Return, d Device, size int) (string, Return) {
	buf := make([]byte, size)
	ret := f(d, &buf[0], uint32(size))
	if ret != Success {
		return "", ret
	}
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf), ret
}

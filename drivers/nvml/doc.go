// Package nvml meters NVIDIA GPUs through NVML (libnvidia-ml), one
// drivers.Sensor per GPU index, so that the sampler in shunt/ meters a GPU
// like any chip. It owns the choice between the GPU's energy counter and
// its power reading, the mapping of NVML's errors onto the driver
// contract, and a small Probe for checking a real GPU by hand.
//
// # Energy counter (Volta and newer)
//
// Where nvmlDeviceGetTotalEnergyConsumption is supported, a reading is the
// counter's delta (millijoules since the driver loaded) between two reads,
// over [previous read, this read]: Kind = drivers.KindModel, because NVIDIA
// publishes no rigorous error bound for the counter. The counter updates
// every 10 to 100 ms depending on the GPU and carries no timestamp, so
// each edge is uncertain by Config.UpdatePeriod (default 100 ms, the
// slowest seen); Accuracy.Quantum is the counter's 1 mJ. A counter that
// goes backwards (driver reload, GPU reset) returns an error and the next
// reading does not claim to follow the last; so does a counter that stops
// being supported mid-run, or one unchanged for longer than
// Config.StaleAfter (drivers.ErrStale).
//
// # Power reading (older GPUs)
//
// Where the counter is unsupported, nvmlDeviceGetPowerUsage (milliwatts)
// gives point readings (Start == End, Kind = drivers.KindPoint) which the
// sampler can only integrate as a model-based figure. On Ampere and newer
// the value is a one-second average, which Config.PowerWindow states as
// the reading's uncertainty.
//
// # Error budget
//
// Accuracy.FullScale is the GPU's enforced power limit (else its power
// management limit, else Config.FullScale). Offset defaults to the ±5 W
// nvidia-smi documents for board power draw and GainErr to a stated 5 %;
// neither is a rigorous bound, which is why neither kind can support a
// hardware claim.
//
// # Loading NVML
//
// NVML is loaded at run time with github.com/ebitengine/purego, which
// calls C without cgo, so meshd builds the same with CGO_ENABLED=0 or 1
// and runs on machines without the library: there, opening a GPU
// returns an error wrapping drivers.ErrNoDevice that names the library
// and says the NVIDIA driver is not installed. The binding (dl.go) is
// exactly the calls the driver makes, behind Library; a function the
// installed library lacks answers ErrorFunctionNotFound, which the
// driver treats as unsupported. New and Probe take a Library, the seam
// tests fill with a fake of those calls; the loader itself is tested on a
// stand-in library built from testdata/fakenvml.c with NVML's C
// signatures.
//
// Without cgo, purego's internal fakecgo stands in for runtime/cgo and
// the binary imports dlopen from the C library: it is a dynamically
// linked executable (interpreter ld-linux, DT_NEEDED libc.so.6,
// libdl.so.2, libpthread.so.0), no C toolchain needed to build it, that
// runs wherever glibc's loader is (every Debian, Ubuntu or Raspberry Pi
// OS). Where it is not (musl, no C library at all), build with -tags
// nonvml: the loader is left out, the binary is statically linked, and
// Open and ProbeSystem say the build cannot load NVML.
//
// Polling faster than 50 ms makes NVML return errors or zeros, so Poll may
// not be shorter than MinPoll.
package nvml

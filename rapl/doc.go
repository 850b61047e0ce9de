// Package rapl meters CPU energy through the kernel's powercap interface
// (/sys/class/powercap): the RAPL energy counters of every package, its
// core, uncore and DRAM sub-zones, and the platform (psys) zone. It owns
// zone discovery, the wrap-safe reading of the counters and the error a
// user sees when the kernel refuses to let meshd read them. Each enabled
// zone becomes a drivers.Sensor the sampler in shunt/ meters like any chip.
//
// # Provenance: every zone is KindModel
//
// Intel's counters hold the package's energy as its power control unit
// computes it from voltage-regulator telemetry. That is a measurement of
// sorts, but Intel publishes no error bound for it, and how good it is
// depends on the generation (pre-Haswell parts modelled it outright). AMD's
// counters are the vendor's model of the core's activity. A receipt may
// only claim what hardware measured against a stated bound, so every zone
// is drivers.KindModel, whichever the vendor: RAPL figures can be reported
// but never support a hardware claim.
//
// Accuracy.GainErr is therefore a stated figure, not a rigorous one: 5 %
// for Intel (what published validations of Haswell and later against
// external meters found for package and DRAM energy) and 10 % for AMD and
// unknown vendors. Config.GainErr overrides it. Accuracy.Quantum is one
// counter unit: the larger of sysfs's 1 µJ resolution and the hardware
// energy unit (2^-16 J, about 15.3 µJ, by default; 61 µJ on Xeons whose
// unit is 2^-14 J, set through Config.EnergyUnit).
//
// # Vendors
//
// AMD RAPL appears through the same powercap tree on kernels 5.8 and later
// (family 17h; 19h from 5.11), under the same intel-rapl:N names, so the
// tree cannot tell vendors apart. Config.Vendor does; left empty it comes
// from the first vendor_id line of /proc/cpuinfo (Config.CPUInfo):
// GenuineIntel is Intel, AuthenticAMD and HygonGenuine are AMD. AMD has no
// DRAM or psys zone.
//
// # Reading the counters
//
// energy_uj counts microjoules and wraps to zero after
// max_energy_range_uj. A reading is the counter's delta between two reads,
// (cur − prev) mod (max+1), over [previous read, this read], with the
// counter's internal update period (about 1 ms) as the uncertainty of both
// edges. Because at most one wrap can be told from a delta, the sensor
// polls at least every max_energy_range_uj / (4 × MaxPower): a gap longer
// than that is ambiguous and returns an error, never a number. MaxPower
// comes from Config.MaxPower, else the largest of the zone's
// constraint_*_max_power_uw and constraint_*_power_limit_uw (the short-term
// limit exceeds the long-term maximum on most parts, and a ceiling too low
// would make the poll period unsafe), else 1 kW. Using max+1 as the modulus
// is off by less than one hardware unit per wrap, which the quantum covers.
//
// A counter that stays unchanged for longer than Config.StaleAfter
// (default 100 ms) while reads continue returns an error wrapping
// drivers.ErrStale. A zone whose power truly drops to zero for that long
// (an idle uncore or graphics domain) needs a longer StaleAfter, or a
// negative one to disable the check.
//
// # Permissions
//
// Since Linux 5.10 energy_uj is readable only by root (CVE-2020-8694: the
// counters leak information through a power side channel). The tmpfiles.d
// rule systemd/meshd-powercap.conf grants the meshd group read access to
// every zone's counter at boot, and systemd/99-meshd-powercap.rules does the
// same when the RAPL driver loads later. Install them with
//
//	install -m 0644 systemd/meshd-powercap.conf /etc/tmpfiles.d/
//	install -m 0644 systemd/99-meshd-powercap.rules /etc/udev/rules.d/
//	systemd-tmpfiles --create meshd-powercap.conf
//
// and run meshd in group meshd. A permission error is reported as such,
// naming these files, and never as a zero.
//
// The package reads the tree through an fs.FS (os.DirFS of the root in
// production) so that tests can serve counter values and refuse access
// deterministically.
package rapl

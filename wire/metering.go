package wire

// Metering records which meter produced an energy figure and over what
// window, so that an auditor can judge the figure from the receipt alone.
// It is sealed as extension fields (see PROFILE.md).
type Metering struct {
	// Meter names the meter, e.g. "ina226@i2c-1:0x40", "hwmon:ina3221:VDD_IN"
	// or "estimator" when no hardware was involved.
	Meter string
	// WindowNs is the length of the metered window in nanoseconds.
	WindowNs uint64
	// ErrorUJ is the meter's error bound for the window in µJ; 0 when the
	// meter states none (an Estimator figure is a bound, not a measurement).
	ErrorUJ uint64
	// Samples is how many readings fell inside the window.
	Samples uint64
	// MaxGapNs is the largest gap between consecutive readings in the window.
	MaxGapNs uint64
}

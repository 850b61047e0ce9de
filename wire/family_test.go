package wire

import (
	"slices"
	"testing"
)

func TestSpanMembers(t *testing.T) {
	for _, c := range []struct {
		name string
		want []string
		ok   bool
	}{
		{"ina226@i2c-1:0x40", []string{"ina226@i2c-1:0x40"}, true},
		{"span(ina226@i2c-1:0x40+rapl:package-0)", []string{"ina226@i2c-1:0x40", "rapl:package-0"}, true},
		// The breakdown is not in the figure, so it does not weaken the kind.
		{"span(ina226@i2c-1:0x40; inside: rapl:package-0)", []string{"ina226@i2c-1:0x40"}, true},
		{"span(ina226@i2c-1:0x40+ina226@i2c-1:0x41; inside: rapl:package-0+nvml:0)", []string{"ina226@i2c-1:0x40", "ina226@i2c-1:0x41"}, true},
		{"span(a++b)", nil, false},
		{"span(a+b", nil, false},
		{"span(; inside: rapl:package-0)", nil, false},
	} {
		got, ok := SpanMembers(c.name)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("SpanMembers(%q) = %q %v, want %q %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

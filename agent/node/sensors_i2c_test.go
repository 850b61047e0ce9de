package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/agent/config"
	"meshd/drivers"
)

// A missing I2C bus is named with its device node and what to enable,
// not periph's "did you forget to call Init()?".
func TestI2COpenError(t *testing.T) {
	dev := t.TempDir()
	if err := os.WriteFile(filepath.Join(dev, "i2c-3"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	periph := errors.New("i2creg: no bus found; did you forget to call Init()?")
	tests := []struct {
		bus      string
		says     []string
		noDevice bool
	}{
		{"1", []string{"I2C bus 1 not found: " + dev + "/i2c-1 does not exist; enable I2C", "modprobe i2c-dev", "buses present: I2C3"}, true},
		{dev + "/i2c-1", []string{"I2C bus 1 not found"}, true},
		{"I2C1", []string{"I2C bus 1 not found"}, true},
		{"3", []string{"open I2C bus 3 (" + dev + "/i2c-3): i2creg"}, false}, // present but unopenable: periph's reason
		{"board", []string{`open I2C bus "board": i2creg`}, false},
	}
	for _, tt := range tests {
		err := i2cOpenError(tt.bus, dev, []string{"I2C3"}, periph)
		for _, w := range tt.says {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("bus %q: %v, lacks %q", tt.bus, err, w)
			}
		}
		if tt.noDevice && (!errors.Is(err, drivers.ErrNoDevice) || strings.Contains(err.Error(), "Init()")) {
			t.Errorf("bus %q: %v: want drivers.ErrNoDevice without periph's hint", tt.bus, err)
		}
	}
}

// Through OpenSensor on this machine, when it has no /dev/i2c-1.
func TestOpenSensorMissingBus(t *testing.T) {
	if _, err := os.Stat("/dev/i2c-1"); err == nil {
		t.Skip("this machine has /dev/i2c-1")
	}
	_, err := OpenSensor(context.Background(), config.Meter{Driver: "ina226", Bus: "1", Address: 0x40, ShuntUOhm: 10000, MaxCurrentA: 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "I2C bus 1 not found: /dev/i2c-1 does not exist; enable I2C") {
		t.Fatalf("OpenSensor: %v", err)
	}
}

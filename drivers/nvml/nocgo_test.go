//go:build !cgo

package nvml_test

import (
	"errors"
	"strings"
	"testing"

	"meshd/drivers"
	"meshd/drivers/nvml"
)

func TestNoCgoSaysWhy(t *testing.T) {
	s, err := nvml.Open(0, nvml.Config{})
	if s != nil || !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), nvml.DefaultLibrary) || !strings.Contains(err.Error(), "cgo") {
		t.Fatalf("Open without cgo = %v, %v; want an ErrNoDevice naming the library and cgo", s, err)
	}
	if _, err := nvml.ProbeSystem(nvml.Config{Library: "/opt/nv/libnvidia-ml.so.1"}); !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), "/opt/nv/libnvidia-ml.so.1") {
		t.Fatalf("ProbeSystem without cgo: %v", err)
	}
}

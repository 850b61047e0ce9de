//go:build nonvml

package nvml_test

import (
	"errors"
	"strings"
	"testing"

	"meshd/drivers"
	gpu "meshd/drivers/nvml"
)

func TestNoNVMLBuildSaysWhy(t *testing.T) {
	s, err := gpu.Open(0, gpu.Config{})
	if s != nil || !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), gpu.DefaultLibrary) || !strings.Contains(err.Error(), "-tags nonvml") {
		t.Fatalf("Open in a nonvml build = %v, %v; want an ErrNoDevice naming the library and the tag", s, err)
	}
	if _, err := gpu.ProbeSystem(gpu.Config{Library: "/opt/nv/libnvidia-ml.so.1"}); !errors.Is(err, drivers.ErrNoDevice) ||
		!strings.Contains(err.Error(), "/opt/nv/libnvidia-ml.so.1") {
		t.Fatalf("ProbeSystem in a nonvml build: %v", err)
	}
}

//go:build nonvml

package nvml

import (
	"fmt"

	"meshd/drivers"
)

// load refuses: a build with -tags nonvml leaves the run-time loader
// out, so that the binary is statically linked and needs no C library
// (musl or libc-less systems), and cannot open any shared library.
func load(lib string) (Library, error) {
	return nil, fmt.Errorf("nvml: this binary was built with -tags nonvml (fully static) and cannot load %s: %w", lib, drivers.ErrNoDevice)
}

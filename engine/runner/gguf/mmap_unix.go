//go:build unix

package gguf

import (
	"os"
	"syscall"
)

func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	data, err := syscall.Mmap(int(fh.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return syscall.Munmap(data) }, nil
}

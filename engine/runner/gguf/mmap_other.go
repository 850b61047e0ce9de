//go:build !unix

package gguf

import (
	"io"
	"os"
)

func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(fh, data); err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}

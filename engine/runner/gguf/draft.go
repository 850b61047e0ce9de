package gguf

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteTruncated writes f with only its first layers blocks: every
// metadata entry and every tensor outside the blocks (vocabulary, token
// embeddings, final norm, output head) as they are, <arch>.block_count
// set to layers. The result is a draft model for speculative decoding
// whose agreement with f is controlled by how many blocks it keeps: all
// of them, and it is f.
func WriteTruncated(w io.Writer, f *File, layers int) error {
	arch, _ := f.String("general.architecture")
	key := arch + ".block_count"
	have, ok := f.Uint(key)
	switch {
	case !ok:
		return fmt.Errorf("gguf: no %s to truncate", key)
	case layers < 1 || uint64(layers) > have:
		return fmt.Errorf("gguf: cannot keep %d of %d blocks", layers, have)
	}
	var gw Writer
	for _, kv := range f.KV {
		v := kv.Value
		if kv.Key == key {
			v = uint32(layers)
		}
		gw.AddKV(kv.Key, v)
	}
	for _, ti := range f.Tensors {
		if rest, ok := strings.CutPrefix(ti.Name, "blk."); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest+".", '.')])
			if err != nil {
				return fmt.Errorf("gguf: tensor %s: %w", ti.Name, err)
			}
			if n >= layers {
				continue
			}
		}
		data := f.TensorData(ti)
		gw.AddTensor(ti.Name, ti.Type, ti.Dims, func() ([]byte, error) { return data, nil })
	}
	_, err := gw.WriteTo(w)
	return err
}

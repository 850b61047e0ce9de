package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Writer assembles a GGUF v3 file. Tensor data is produced on demand in
// directory order while writing, so a large model never has to be held in
// memory whole.
type Writer struct {
	// Alignment of the data section and of each tensor; 0 means the
	// default. A non-default value is also recorded as general.alignment.
	Alignment uint64
	kv        []KV
	tensors   []pendingTensor
}

type pendingTensor struct {
	info   TensorInfo
	data   func() ([]byte, error)
	stream func(io.Writer) error // instead of data: writes the tensor itself
}

// AddKV appends a metadata entry. v must be one of the Go types listed on
// KV, or a slice of one of the scalar types (wrapped as an Array).
func (w *Writer) AddKV(key string, v any) { w.kv = append(w.kv, KV{Key: key, Value: v}) }

// AddTensor appends a tensor. data is called once during WriteTo and must
// return exactly the tensor's encoded size.
func (w *Writer) AddTensor(name string, t TensorType, dims []uint64, data func() ([]byte, error)) {
	w.tensors = append(w.tensors, pendingTensor{info: TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...)}, data: data})
}

// AddTensorStream appends a tensor whose data write writes during WriteTo,
// in pieces of its choosing, so that not even one tensor has to be held
// in memory whole; it must write exactly the tensor's encoded size.
func (w *Writer) AddTensorStream(name string, t TensorType, dims []uint64, write func(io.Writer) error) {
	w.tensors = append(w.tensors, pendingTensor{info: TensorInfo{Name: name, Type: t, Dims: append([]uint64(nil), dims...)}, stream: write})
}

// WriteTo writes the file.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := w.Alignment
	if align == 0 {
		align = DefaultAlignment
	}
	if align&(align-1) != 0 || align > math.MaxUint32 {
		return 0, fmt.Errorf("gguf: alignment %d is not a power of two", align)
	}
	kvs := w.kv
	if align != DefaultAlignment {
		kvs = append([]KV{{Key: "general.alignment", Value: uint32(align)}}, kvs...)
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	cw := &countWriter{w: bw}
	e := encoder{w: cw}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return cw.n, fmt.Errorf("gguf: key %q: %w", kv.Key, err)
		}
	}
	var off uint64
	for i := range w.tensors {
		ti := &w.tensors[i].info
		if !ti.Type.Known() || len(ti.Dims) > MaxDims || (len(ti.Dims) > 0 && ti.Dims[0]%ti.Type.BlockSize() != 0) {
			return cw.n, fmt.Errorf("gguf: tensor %q: invalid type %s or dims %v", ti.Name, ti.Type, ti.Dims)
		}
		ti.Offset = off
		off += pad(ti.Bytes(), align)
		e.str(ti.Name)
		e.u32(uint32(len(ti.Dims)))
		for _, d := range ti.Dims {
			e.u64(d)
		}
		e.u32(uint32(ti.Type))
		e.u64(ti.Offset)
	}
	if e.err != nil {
		return cw.n, e.err
	}
	zeros := make([]byte, align)
	e.raw(zeros[:pad(uint64(cw.n), align)-uint64(cw.n)])
	for _, t := range w.tensors {
		if t.stream != nil {
			start := cw.n
			if err := t.stream(cw); err != nil {
				return cw.n, fmt.Errorf("gguf: tensor %q: %w", t.info.Name, err)
			}
			if n := uint64(cw.n - start); n != t.info.Bytes() {
				return cw.n, fmt.Errorf("gguf: tensor %q: wrote %d bytes, want %d", t.info.Name, n, t.info.Bytes())
			}
			e.raw(zeros[:pad(t.info.Bytes(), align)-t.info.Bytes()])
			if e.err != nil {
				return cw.n, e.err
			}
			continue
		}
		data, err := t.data()
		if err != nil {
			return cw.n, fmt.Errorf("gguf: tensor %q: %w", t.info.Name, err)
		}
		if uint64(len(data)) != t.info.Bytes() {
			return cw.n, fmt.Errorf("gguf: tensor %q: got %d bytes, want %d", t.info.Name, len(data), t.info.Bytes())
		}
		e.raw(data)
		e.raw(zeros[:pad(uint64(len(data)), align)-uint64(len(data))])
		if e.err != nil {
			return cw.n, e.err
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, e.err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) raw(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}
func (e *encoder) u8(v uint8) { e.raw([]byte{v}) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:], v)
	e.raw(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:], v)
	e.raw(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:], v)
	e.raw(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.raw([]byte(s))
}

func (e *encoder) value(v any) error {
	switch x := v.(type) {
	case Array:
		return e.value(x.Values)
	case []string:
		e.u32(uint32(TypeArray))
		e.u32(uint32(TypeString))
		e.u64(uint64(len(x)))
		for _, s := range x {
			e.str(s)
		}
		return nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []uint64, []int64, []float64:
		a := Array{Values: x}
		e.u32(uint32(TypeArray))
		t, _ := scalarType(sliceElem(x))
		e.u32(uint32(t))
		e.u64(uint64(a.Len()))
		return e.elems(x)
	}
	t, ok := scalarType(v)
	if !ok {
		return fmt.Errorf("unsupported metadata type %T", v)
	}
	e.u32(uint32(t))
	e.scalar(v)
	return nil
}

func (e *encoder) elems(v any) error {
	switch x := v.(type) {
	case []uint8:
		e.raw(x)
	case []int8:
		for _, s := range x {
			e.u8(uint8(s))
		}
	case []uint16:
		for _, s := range x {
			e.u16(s)
		}
	case []int16:
		for _, s := range x {
			e.u16(uint16(s))
		}
	case []uint32:
		for _, s := range x {
			e.u32(s)
		}
	case []int32:
		for _, s := range x {
			e.u32(uint32(s))
		}
	case []float32:
		for _, s := range x {
			e.u32(math.Float32bits(s))
		}
	case []bool:
		for _, s := range x {
			e.scalar(s)
		}
	case []uint64:
		for _, s := range x {
			e.u64(s)
		}
	case []int64:
		for _, s := range x {
			e.u64(uint64(s))
		}
	case []float64:
		for _, s := range x {
			e.u64(math.Float64bits(s))
		}
	}
	return nil
}

func sliceElem(v any) any {
	switch v.(type) {
	case []uint8:
		return uint8(0)
	case []int8:
		return int8(0)
	case []uint16:
		return uint16(0)
	case []int16:
		return int16(0)
	case []uint32:
		return uint32(0)
	case []int32:
		return int32(0)
	case []float32:
		return float32(0)
	case []bool:
		return false
	case []uint64:
		return uint64(0)
	case []int64:
		return int64(0)
	case []float64:
		return float64(0)
	}
	return nil
}

func scalarType(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return TypeUint8, true
	case int8:
		return TypeInt8, true
	case uint16:
		return TypeUint16, true
	case int16:
		return TypeInt16, true
	case uint32:
		return TypeUint32, true
	case int32:
		return TypeInt32, true
	case float32:
		return TypeFloat32, true
	case bool:
		return TypeBool, true
	case string:
		return TypeString, true
	case uint64:
		return TypeUint64, true
	case int64:
		return TypeInt64, true
	case float64:
		return TypeFloat64, true
	}
	return 0, false
}

func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	}
}

package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
)

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// maxNameLen is ggml's GGML_MAX_NAME: longer tensor names are refused.
const maxNameLen = 64

// File is a parsed GGUF file. Tensor data is referenced, not copied: a
// File from Open stays valid until Close.
type File struct {
	Version    uint32
	KV         []KV
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute offset of the data section

	data    []byte
	kvIndex map[string]int
	tIndex  map[string]int
	unmap   func() error
}

// Open maps the file at path read-only and parses it.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.Size() < 4 {
		return nil, fmt.Errorf("%w: %s: %d bytes is too short", ErrFormat, path, st.Size())
	}
	data, unmap, err := mapFile(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.unmap = unmap
	return f, nil
}

// Close releases the file mapping. Tensor data must not be used after.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	f.data = nil
	return err
}

// Parse parses a whole GGUF file held in memory.
func Parse(data []byte) (*File, error) {
	r := &reader{b: data}
	f := &File{data: data, kvIndex: map[string]int{}, tIndex: map[string]int{}}
	magic, err := r.bytes(4)
	if err != nil {
		return nil, fmt.Errorf("%w: reading magic: %w", ErrFormat, err)
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w: bad magic %q, want %q", ErrFormat, magic, Magic)
	}
	if f.Version, err = r.u32(); err != nil {
		return nil, fmt.Errorf("%w: reading version: %w", ErrFormat, err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("%w: unsupported version %d (only %d is read)", ErrFormat, f.Version, Version)
	}
	nTensors, err := r.u64()
	if err != nil {
		return nil, fmt.Errorf("%w: reading tensor count: %w", ErrFormat, err)
	}
	nKV, err := r.u64()
	if err != nil {
		return nil, fmt.Errorf("%w: reading kv count: %w", ErrFormat, err)
	}
	// Every KV takes at least 13 bytes and every tensor info 24: counts the
	// rest of the file cannot hold are refused before anything is allocated.
	if nKV > uint64(r.left())/13 {
		return nil, fmt.Errorf("%w: kv count %d exceeds what %d remaining bytes can hold", ErrFormat, nKV, r.left())
	}
	f.KV = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		key, err := r.str()
		if err != nil {
			return nil, fmt.Errorf("%w: kv %d key: %w", ErrFormat, i, err)
		}
		if _, dup := f.kvIndex[key]; dup {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrFormat, key)
		}
		t, err := r.u32()
		if err != nil {
			return nil, fmt.Errorf("%w: kv %q type: %w", ErrFormat, key, err)
		}
		v, err := r.value(ValueType(t), true)
		if err != nil {
			return nil, fmt.Errorf("%w: kv %q: %w", ErrFormat, key, err)
		}
		f.kvIndex[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}
	f.Alignment = DefaultAlignment
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.(uint32)
		if !ok {
			return nil, fmt.Errorf("%w: general.alignment has type %T, want u32", ErrFormat, v)
		}
		if a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("%w: general.alignment %d is not a power of two", ErrFormat, a)
		}
		f.Alignment = uint64(a)
	}
	if nTensors > uint64(r.left())/24 {
		return nil, fmt.Errorf("%w: tensor count %d exceeds what %d remaining bytes can hold", ErrFormat, nTensors, r.left())
	}
	f.Tensors = make([]TensorInfo, 0, nTensors)
	var expect uint64
	for i := uint64(0); i < nTensors; i++ {
		ti, err := r.tensorInfo()
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %d: %w", ErrFormat, i, err)
		}
		if _, dup := f.tIndex[ti.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrFormat, ti.Name)
		}
		// ggml lays tensors out back to back in directory order; any other
		// offset is either overlap or a hole, and both mean a corrupt file.
		if ti.Offset != expect {
			return nil, fmt.Errorf("%w: tensor %q at offset %d, expected %d", ErrFormat, ti.Name, ti.Offset, expect)
		}
		nb := ti.Bytes()
		if nb > uint64(len(data)) {
			return nil, fmt.Errorf("%w: tensor %q needs %d bytes, more than the file", ErrFormat, ti.Name, nb)
		}
		expect += pad(nb, f.Alignment)
		f.tIndex[ti.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, ti)
	}
	f.DataOffset = pad(uint64(r.off), f.Alignment)
	if f.DataOffset > uint64(len(data)) && len(f.Tensors) > 0 {
		return nil, fmt.Errorf("%w: data section at %d is past the end of the %d-byte file", ErrFormat, f.DataOffset, len(data))
	}
	for _, ti := range f.Tensors {
		end := f.DataOffset + ti.Offset + ti.Bytes()
		if end > uint64(len(data)) {
			return nil, fmt.Errorf("%w: tensor %q ends at %d, past the end of the %d-byte file (truncated?)", ErrFormat, ti.Name, end, len(data))
		}
	}
	return f, nil
}

// Get returns the value of a metadata key.
func (f *File) Get(key string) (any, bool) {
	i, ok := f.kvIndex[key]
	if !ok {
		return nil, false
	}
	return f.KV[i].Value, true
}

// String returns a string-typed metadata value.
func (f *File) String(key string) (string, bool) {
	v, _ := f.Get(key)
	s, ok := v.(string)
	return s, ok
}

// Uint returns an integer metadata value of any width as uint64. Negative
// values are reported as absent.
func (f *File) Uint(key string) (uint64, bool) {
	v, _ := f.Get(key)
	switch x := v.(type) {
	case uint8:
		return uint64(x), true
	case uint16:
		return uint64(x), true
	case uint32:
		return uint64(x), true
	case uint64:
		return x, true
	case int8:
		return uint64(x), x >= 0
	case int16:
		return uint64(x), x >= 0
	case int32:
		return uint64(x), x >= 0
	case int64:
		return uint64(x), x >= 0
	}
	return 0, false
}

// Float returns a float metadata value.
func (f *File) Float(key string) (float64, bool) {
	v, _ := f.Get(key)
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// Bool returns a bool metadata value.
func (f *File) Bool(key string) (bool, bool) {
	v, _ := f.Get(key)
	b, ok := v.(bool)
	return b, ok
}

// ArrayOf returns an array metadata value.
func (f *File) ArrayOf(key string) (Array, bool) {
	v, _ := f.Get(key)
	a, ok := v.(Array)
	return a, ok
}

// Tensor looks a tensor up by name.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	i, ok := f.tIndex[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Tensors[i], true
}

// TensorData returns the encoded bytes of a tensor, aliasing the file.
func (f *File) TensorData(ti TensorInfo) []byte {
	start := f.DataOffset + ti.Offset
	return f.data[start : start+ti.Bytes() : start+ti.Bytes()]
}

// Size is the length of the parsed file in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

type reader struct {
	b   []byte
	off int
}

var errShort = errors.New("unexpected end of file")

func (r *reader) left() int { return len(r.b) - r.off }

func (r *reader) bytes(n uint64) ([]byte, error) {
	if n > uint64(r.left()) {
		return nil, fmt.Errorf("need %d bytes at offset %d, %d left: %w", n, r.off, r.left(), errShort)
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, nil
}

func (r *reader) u8() (uint8, error) {
	b, err := r.bytes(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *reader) u16() (uint16, error) {
	b, err := r.bytes(2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.bytes(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.bytes(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *reader) str() (string, error) {
	n, err := r.u64()
	if err != nil {
		return "", err
	}
	if n > uint64(r.left()) {
		return "", fmt.Errorf("string length %d exceeds the %d bytes left in the file", n, r.left())
	}
	b, _ := r.bytes(n)
	return string(b), nil
}

func (r *reader) value(t ValueType, allowArray bool) (any, error) {
	switch t {
	case TypeUint8:
		return r.u8()
	case TypeInt8:
		v, err := r.u8()
		return int8(v), err
	case TypeUint16:
		return r.u16()
	case TypeInt16:
		v, err := r.u16()
		return int16(v), err
	case TypeUint32:
		return r.u32()
	case TypeInt32:
		v, err := r.u32()
		return int32(v), err
	case TypeFloat32:
		v, err := r.u32()
		return math.Float32frombits(v), err
	case TypeBool:
		v, err := r.u8()
		if err != nil {
			return nil, err
		}
		if v > 1 {
			return nil, fmt.Errorf("bool value %d is neither 0 nor 1", v)
		}
		return v == 1, nil
	case TypeString:
		return r.str()
	case TypeUint64:
		return r.u64()
	case TypeInt64:
		v, err := r.u64()
		return int64(v), err
	case TypeFloat64:
		v, err := r.u64()
		return math.Float64frombits(v), err
	case TypeArray:
		if !allowArray {
			return nil, errors.New("nested arrays are not supported")
		}
		return r.array()
	}
	return nil, fmt.Errorf("unknown value type %d", uint32(t))
}

func (r *reader) array() (Array, error) {
	et, err := r.u32()
	if err != nil {
		return Array{}, err
	}
	elem := ValueType(et)
	n, err := r.u64()
	if err != nil {
		return Array{}, err
	}
	min := uint64(elem.size())
	switch elem {
	case TypeString:
		min = 8
	case TypeArray:
		return Array{}, errors.New("nested arrays are not supported")
	}
	if min == 0 {
		return Array{}, fmt.Errorf("unknown array element type %d", et)
	}
	if n > uint64(r.left())/min {
		return Array{}, fmt.Errorf("array of %d %s exceeds the %d bytes left in the file", n, elem, r.left())
	}
	a := Array{Elem: elem}
	switch elem {
	case TypeString:
		v := make([]string, n)
		for i := range v {
			if v[i], err = r.str(); err != nil {
				return Array{}, fmt.Errorf("element %d: %w", i, err)
			}
		}
		a.Values = v
		return a, nil
	}
	raw, _ := r.bytes(n * min)
	le := binary.LittleEndian
	switch elem {
	case TypeUint8:
		a.Values = append([]uint8(nil), raw...)
	case TypeInt8:
		v := make([]int8, n)
		for i := range v {
			v[i] = int8(raw[i])
		}
		a.Values = v
	case TypeBool:
		v := make([]bool, n)
		for i := range v {
			if raw[i] > 1 {
				return Array{}, fmt.Errorf("element %d: bool value %d is neither 0 nor 1", i, raw[i])
			}
			v[i] = raw[i] == 1
		}
		a.Values = v
	case TypeUint16:
		a.Values = decodeFixed(raw, n, 2, func(b []byte) uint16 { return le.Uint16(b) })
	case TypeInt16:
		a.Values = decodeFixed(raw, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case TypeUint32:
		a.Values = decodeFixed(raw, n, 4, le.Uint32)
	case TypeInt32:
		a.Values = decodeFixed(raw, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case TypeFloat32:
		a.Values = decodeFixed(raw, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case TypeUint64:
		a.Values = decodeFixed(raw, n, 8, le.Uint64)
	case TypeInt64:
		a.Values = decodeFixed(raw, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case TypeFloat64:
		a.Values = decodeFixed(raw, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	}
	return a, nil
}

func (r *reader) tensorInfo() (TensorInfo, error) {
	var ti TensorInfo
	var err error
	if ti.Name, err = r.str(); err != nil {
		return ti, fmt.Errorf("name: %w", err)
	}
	if len(ti.Name) >= maxNameLen {
		return ti, fmt.Errorf("name %.20q... is %d bytes, limit %d", ti.Name, len(ti.Name), maxNameLen-1)
	}
	nd, err := r.u32()
	if err != nil {
		return ti, fmt.Errorf("%q n_dims: %w", ti.Name, err)
	}
	if nd > MaxDims {
		return ti, fmt.Errorf("%q has %d dimensions, at most %d allowed", ti.Name, nd, MaxDims)
	}
	ti.Dims = make([]uint64, nd)
	n := uint64(1)
	for j := range ti.Dims {
		if ti.Dims[j], err = r.u64(); err != nil {
			return ti, fmt.Errorf("%q dim %d: %w", ti.Name, j, err)
		}
		hi, lo := bits.Mul64(n, ti.Dims[j])
		if hi != 0 || lo > math.MaxInt64 || ti.Dims[j] > math.MaxInt64 {
			return ti, fmt.Errorf("%q element count overflows (dims %v)", ti.Name, ti.Dims[:j+1])
		}
		n = lo
	}
	t, err := r.u32()
	if err != nil {
		return ti, fmt.Errorf("%q type: %w", ti.Name, err)
	}
	ti.Type = TensorType(t)
	if !ti.Type.Known() {
		return ti, fmt.Errorf("%q has unknown tensor type %d", ti.Name, t)
	}
	if len(ti.Dims) > 0 && ti.Dims[0]%ti.Type.BlockSize() != 0 {
		return ti, fmt.Errorf("%q row length %d is not a multiple of the %s block size %d", ti.Name, ti.Dims[0], ti.Type, ti.Type.BlockSize())
	}
	if ti.Offset, err = r.u64(); err != nil {
		return ti, fmt.Errorf("%q offset: %w", ti.Name, err)
	}
	return ti, nil
}

// decodeFixed decodes n little-endian elements of size bytes each.
func decodeFixed[T any](raw []byte, n, size uint64, dec func([]byte) T) []T {
	v := make([]T, n)
	for i := range v {
		v[i] = dec(raw[size*uint64(i):])
	}
	return v
}

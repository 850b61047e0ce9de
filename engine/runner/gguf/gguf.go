// Package gguf owns the GGUF v3 container format: parsing a file's header,
// metadata and tensor directory with the same offset rules ggml enforces,
// writing files, the scalar formats the format stores (F16, BF16, Q8_0,
// Q4_0), and synthetic llama-architecture models for tests and benchmarks.
package gguf

import "fmt"

// Magic is the four bytes every GGUF file starts with.
const Magic = "GGUF"

// Version is the only container version this package reads and writes.
const Version = 3

// DefaultAlignment is used when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is ggml's GGML_MAX_DIMS.
const MaxDims = 4

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, numbered as in the GGUF specification.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of a fixed-size scalar, 0 for string and array.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// TensorType is a ggml tensor element type.
type TensorType uint32

// The tensor types this package knows the layout of.
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q4_0 TensorType = 2
	Q4_1 TensorType = 3
	Q5_0 TensorType = 6
	Q5_1 TensorType = 7
	Q8_0 TensorType = 8
	Q8_1 TensorType = 9
	Q2_K TensorType = 10
	Q3_K TensorType = 11
	Q4_K TensorType = 12
	Q5_K TensorType = 13
	Q6_K TensorType = 14
	Q8_K TensorType = 15
	I8   TensorType = 24
	I16  TensorType = 25
	I32  TensorType = 26
	I64  TensorType = 27
	F64  TensorType = 28
	BF16 TensorType = 30
)

type typeTraits struct {
	name       string
	blockSize  uint64 // elements per block
	blockBytes uint64 // bytes per block
}

var tensorTypes = map[TensorType]typeTraits{
	F32:  {"f32", 1, 4},
	F16:  {"f16", 1, 2},
	Q4_0: {"q4_0", 32, 18},
	Q4_1: {"q4_1", 32, 20},
	Q5_0: {"q5_0", 32, 22},
	Q5_1: {"q5_1", 32, 24},
	Q8_0: {"q8_0", 32, 34},
	Q8_1: {"q8_1", 32, 36},
	Q2_K: {"q2_k", 256, 84},
	Q3_K: {"q3_k", 256, 110},
	Q4_K: {"q4_k", 256, 144},
	Q5_K: {"q5_k", 256, 176},
	Q6_K: {"q6_k", 256, 210},
	Q8_K: {"q8_k", 256, 292},
	I8:   {"i8", 1, 1},
	I16:  {"i16", 1, 2},
	I32:  {"i32", 1, 4},
	I64:  {"i64", 1, 8},
	F64:  {"f64", 1, 8},
	BF16: {"bf16", 1, 2},
}

func (t TensorType) String() string {
	if tr, ok := tensorTypes[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("ggml_type(%d)", uint32(t))
}

// Known reports whether the type's block layout is known.
func (t TensorType) Known() bool { _, ok := tensorTypes[t]; return ok }

// BlockSize is the number of elements in one block of the type (1 for
// scalar types), 0 if the type is unknown.
func (t TensorType) BlockSize() uint64 { return tensorTypes[t].blockSize }

// BlockBytes is the encoded size of one block, 0 if the type is unknown.
func (t TensorType) BlockBytes() uint64 { return tensorTypes[t].blockBytes }

// ParseTensorType maps a lower-case type name such as "q8_0" to its type.
func ParseTensorType(name string) (TensorType, error) {
	for t, tr := range tensorTypes {
		if tr.name == name {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q", name)
}

// RowBytes is the encoded size of n elements of type t. n must be a
// multiple of the block size.
func (t TensorType) RowBytes(n uint64) uint64 {
	tr := tensorTypes[t]
	if tr.blockSize == 0 {
		return 0
	}
	return n / tr.blockSize * tr.blockBytes
}

// KV is one metadata entry. Value holds a Go value whose type mirrors the
// GGUF type: uint8, int8, uint16, int16, uint32, int32, float32, bool,
// string, uint64, int64, float64, or an Array.
type KV struct {
	Key   string
	Value any
}

// Array is a metadata array. Values is a slice of the element's Go type
// (for example []string, []float32, []int32).
type Array struct {
	Elem   ValueType
	Values any
}

// Len is the number of elements.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	}
	return 0
}

// TensorInfo is one entry of the tensor directory.
type TensorInfo struct {
	Name string
	// Dims lists the extents with the contiguous axis (ne0) first.
	Dims []uint64
	Type TensorType
	// Offset is relative to the start of the data section.
	Offset uint64
}

// Elements is the product of the extents.
func (ti TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range ti.Dims {
		n *= d
	}
	return n
}

// Bytes is the encoded size of the tensor.
func (ti TensorInfo) Bytes() uint64 { return ti.Type.RowBytes(ti.Elements()) }

func pad(n, align uint64) uint64 { return (n + align - 1) / align * align }

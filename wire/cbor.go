package wire

import (
	"sync"

	"github.com/fxamacker/cbor/v2"
)

// The CBOR modes are immutable once built; building them is not free, so
// they are built once and shared.
var modes = sync.OnceValues(func() (cbor.EncMode, cbor.DecMode) {
	enc, err := cbor.EncOptions{
		Sort:          cbor.SortCoreDeterministic, // RFC 8949 §4.2.1 bytewise key order
		ShortestFloat: cbor.ShortestFloat16,
		IndefLength:   cbor.IndefLengthForbidden,
		TagsMd:        cbor.TagsForbidden,
	}.EncMode()
	if err != nil {
		panic(err) // static options: a failure is a programming error
	}
	dec, err := cbor.DecOptions{
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		IndefLength:       cbor.IndefLengthForbidden,
		TagsMd:            cbor.TagsForbidden,
		MaxNestedLevels:   16,
		MaxArrayElements:  1 << 16,
		MaxMapPairs:       1 << 10,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
	}.DecMode()
	if err != nil {
		panic(err)
	}
	return enc, dec
})

// EncMode returns the deterministic (RFC 8949 §4.2.1) CBOR encoder used for
// everything that is hashed or signed.
func EncMode() cbor.EncMode { e, _ := modes(); return e }

// DecMode returns the strict decoder: no duplicate keys, no indefinite
// lengths, no tags, no unknown fields in structs.
func DecMode() cbor.DecMode { _, d := modes(); return d }

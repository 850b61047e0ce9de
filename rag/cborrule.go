package rag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/fxamacker/cbor/v2"
)

// errDecodingRule is CBOR the macula decoding rule refuses. Callers wrap it
// in their own refusal (malformed, malformed_description), as macula does.
var errDecodingRule = errors.New("rag: cbor: refused by the decoding rule")

// The limits of macula's decoding rule (macula_record_cbor:decode_strict):
// at most 64 nested arrays and maps, and at most 131,072 items in all, every
// map key, array element and the top-level value counted once.
const (
	ruleMaxDepth    = 64
	ruleMaxElements = 131072
)

// checkDecodingRule reports whether data is exactly one CBOR item that
// macula's decoding rule accepts:
//
//   - definite lengths only, and no tags;
//   - of the simple values, only null: no false, true or undefined;
//   - floats of any width, but never NaN or an infinity;
//   - integers within int64;
//   - text strings valid UTF-8 (no surrogates, nothing past U+10FFFF);
//   - map keys text or integer, and no key twice, where one key written in two
//     widths is the same key;
//   - at most 64 nested containers and 131,072 items;
//   - nothing after the item.
//
// Heads need not be in their shortest form and map keys need not be sorted:
// the rule accepts both, so a verifier reads a signed tbs as it was received
// and never re-encodes it. fxamacker/cbor decodes only what this accepts.
func checkDecodingRule(data []byte) error {
	w := &ruleWalker{data: data}
	if _, err := w.item(0); err != nil {
		return fmt.Errorf("%w: %w", errDecodingRule, err)
	}
	if w.pos != len(data) {
		return fmt.Errorf("%w: %d bytes after the item", errDecodingRule, len(data)-w.pos)
	}
	return nil
}

type ruleWalker struct {
	data     []byte
	pos      int
	elements int
}

// ruleKey identifies a map key by value, so that one key written in two
// widths is caught as a duplicate.
type ruleKey struct {
	text  string
	isInt bool
	n     int64
}

// head reads an item's initial byte and argument.
func (w *ruleWalker) head() (major byte, ai byte, arg uint64, err error) {
	if w.pos >= len(w.data) {
		return 0, 0, 0, errors.New("truncated")
	}
	ib := w.data[w.pos]
	w.pos++
	major, ai = ib>>5, ib&0x1f
	var n int
	switch {
	case ai < 24:
		return major, ai, uint64(ai), nil
	case ai == 24:
		n = 1
	case ai == 25:
		n = 2
	case ai == 26:
		n = 4
	case ai == 27:
		n = 8
	default:
		return 0, 0, 0, fmt.Errorf("additional information %d", ai)
	}
	if len(w.data)-w.pos < n {
		return 0, 0, 0, errors.New("truncated")
	}
	var buf [8]byte
	copy(buf[8-n:], w.data[w.pos:w.pos+n])
	w.pos += n
	return major, ai, binary.BigEndian.Uint64(buf[:]), nil
}

// item walks one item at a container depth, returning its identity when it
// could serve as a map key.
func (w *ruleWalker) item(depth int) (*ruleKey, error) {
	major, ai, arg, err := w.head()
	if err != nil {
		return nil, err
	}
	w.elements++
	if w.elements > ruleMaxElements {
		return nil, errors.New("too many elements")
	}
	switch major {
	case 0:
		if arg > math.MaxInt64 {
			return nil, errors.New("integer out of range")
		}
		return &ruleKey{isInt: true, n: int64(arg)}, nil
	case 1:
		if arg > math.MaxInt64 {
			return nil, errors.New("integer out of range")
		}
		return &ruleKey{isInt: true, n: -1 - int64(arg)}, nil
	case 2, 3:
		if arg > uint64(len(w.data)-w.pos) {
			return nil, errors.New("truncated string")
		}
		s := w.data[w.pos : w.pos+int(arg)]
		w.pos += int(arg)
		if major == 2 {
			return nil, nil
		}
		if !utf8.Valid(s) {
			return nil, errors.New("invalid text")
		}
		return &ruleKey{text: string(s)}, nil
	case 4:
		if depth+1 > ruleMaxDepth {
			return nil, errors.New("too deep")
		}
		for i := uint64(0); i < arg; i++ {
			if _, err := w.item(depth + 1); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case 5:
		if depth+1 > ruleMaxDepth {
			return nil, errors.New("too deep")
		}
		seen := make(map[ruleKey]bool, min(arg, 64))
		for i := uint64(0); i < arg; i++ {
			k, err := w.item(depth + 1)
			if err != nil {
				return nil, err
			}
			if k == nil {
				return nil, errors.New("a map key that is neither text nor an integer")
			}
			if seen[*k] {
				return nil, errors.New("duplicate map key")
			}
			seen[*k] = true
			if _, err := w.item(depth + 1); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case 6:
		return nil, errors.New("tag")
	default: // 7
		return nil, w.simple(ai, arg)
	}
}

func (w *ruleWalker) simple(ai byte, arg uint64) error {
	var f float64
	switch ai {
	case 22:
		return nil // null
	case 25:
		f = halfToFloat(uint16(arg))
	case 26:
		f = float64(math.Float32frombits(uint32(arg)))
	case 27:
		f = math.Float64frombits(arg)
	default:
		return fmt.Errorf("simple value (additional information %d)", ai)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return errors.New("NaN or infinity")
	}
	return nil
}

// halfToFloat widens an IEEE 754 binary16 value; only whether it is finite
// matters here.
func halfToFloat(h uint16) float64 {
	exp := (h >> 10) & 0x1f
	frac := float64(h & 0x3ff)
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac == 0 {
			return math.Inf(int(sign))
		}
		return math.NaN()
	default:
		return sign * math.Ldexp(1+frac/1024, int(exp)-15)
	}
}

// decodeStrict decodes data that the decoding rule accepts into Go values:
// map[any]any with string or integer keys, []any, string, []byte, uint64,
// int64, float64 and nil.
func decodeStrict(data []byte) (any, error) {
	if err := checkDecodingRule(data); err != nil {
		return nil, err
	}
	var v any
	if err := ruleDecMode.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%w: %w", errDecodingRule, err)
	}
	return v, nil
}

// ruleDecMode decodes what checkDecodingRule has already accepted; its limits
// are raised to the rule's own so it never refuses what the rule accepts.
var ruleDecMode = func() cbor.DecMode {
	dm, err := cbor.DecOptions{
		MaxNestedLevels:  ruleMaxDepth + 1,
		MaxArrayElements: ruleMaxElements,
		MaxMapPairs:      ruleMaxElements,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		UTF8:             cbor.UTF8RejectInvalid,
		IntDec:           cbor.IntDecConvertNone,
	}.DecMode()
	if err != nil {
		panic(fmt.Sprintf("rag: cbor decode options: %v", err))
	}
	return dm
}()

// coreEncMode is RFC 8949 §4.2.1 core deterministic encoding: shortest heads,
// definite lengths, map keys sorted bytewise by their encoding. It is the
// encoding macula_record_cbor:encode/1 produces, so a tbs made here is the
// byte string macula would sign for the same fields.
var coreEncMode = func() cbor.EncMode {
	em, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(fmt.Sprintf("rag: cbor encode options: %v", err))
	}
	return em
}()

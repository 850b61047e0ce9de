package wire

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// ErrNotDeterministic is wrapped by every refusal of bytes that are not
// exactly the RFC 8949 §4.2.1 deterministic encoding of what they hold.
// Signatures and content ids are over bytes, so two encodings of one value
// would be two identities; the hand-rolled readers below refuse all but one.
var ErrNotDeterministic = errors.New("not deterministic CBOR")

// CBOR major types used by mesh/1 payloads.
const (
	MajorUint  byte = 0
	MajorNeg   byte = 1
	MajorBytes byte = 2
	MajorText  byte = 3
	MajorArray byte = 4
	MajorMap   byte = 5
	MajorTag   byte = 6
	MajorOther byte = 7 // floats, booleans, null, undefined, simple values
)

// MaxItemDepth bounds nesting inside an unknown extension value: deep
// enough for any real structure, shallow enough that a hostile input cannot
// exhaust the stack.
const MaxItemDepth = 16

// ReadHead reads the head of the data item at b[off:] and returns its major
// type, its argument (the value, length or count) and the offset after the
// head. It refuses indefinite lengths, reserved additional information and
// any argument not in its shortest form. Major type 7 is returned as read
// (its argument is the simple value or the float bits); callers that accept
// no floats or simple values must refuse it.
func ReadHead(b []byte, off int) (major byte, arg uint64, next int, err error) {
	if off >= len(b) {
		return 0, 0, off, fmt.Errorf("%w: unexpected end of input at offset %d", ErrNotDeterministic, off)
	}
	ib := b[off]
	major, ai := ib>>5, ib&0x1f
	next = off + 1
	switch {
	case ai < 24:
		return major, uint64(ai), next, nil
	case ai <= 27:
		n := 1 << (ai - 24)
		if len(b)-next < n {
			return 0, 0, off, fmt.Errorf("%w: head at offset %d runs past the end", ErrNotDeterministic, off)
		}
		for _, c := range b[next : next+n] {
			arg = arg<<8 | uint64(c)
		}
		next += n
		if major == MajorOther {
			// Floats have no shortest-form rule here: callers refuse them.
			return major, arg, next, nil
		}
		if arg < [...]uint64{24, 1 << 8, 1 << 16, 1 << 32}[ai-24] {
			return 0, 0, off, fmt.Errorf("%w: argument at offset %d is not in shortest form", ErrNotDeterministic, off)
		}
		return major, arg, next, nil
	case ai == 31:
		return 0, 0, off, fmt.Errorf("%w: indefinite length at offset %d", ErrNotDeterministic, off)
	default:
		return 0, 0, off, fmt.Errorf("%w: reserved additional information %d at offset %d", ErrNotDeterministic, ai, off)
	}
}

// ReadString reads a definite-length byte or text string of the given
// major type at b[off:] and returns its content and the offset after it.
// Text must be valid UTF-8 (RFC 8949 §3.1).
func ReadString(b []byte, off int, major byte) (s []byte, next int, err error) {
	m, n, next, err := ReadHead(b, off)
	if err != nil {
		return nil, off, err
	}
	if m != major {
		return nil, off, fmt.Errorf("major type %d at offset %d, want %d", m, off, major)
	}
	if n > uint64(len(b)-next) {
		return nil, off, fmt.Errorf("%w: string at offset %d runs past the end", ErrNotDeterministic, off)
	}
	s = b[next : next+int(n)]
	if major == MajorText && !utf8.Valid(s) {
		return nil, off, fmt.Errorf("%w: text at offset %d is not valid UTF-8", ErrNotDeterministic, off)
	}
	return s, next + int(n), nil
}

// SkipItem checks that b[off:] begins with one deterministically encoded
// data item built only from integers (major 0 and 1), byte and text
// strings, arrays and maps, nested at most MaxItemDepth deep, and returns
// the offset after it. Map keys must be strictly increasing in the bytewise
// order of their encodings, which also rules out duplicates. Tags, floats,
// booleans, null, undefined and other simple values are refused: PROFILE.md
// §1 keeps them out of everything that is signed.
func SkipItem(b []byte, off int) (int, error) {
	return skipItem(b, off, 0)
}

func skipItem(b []byte, off, depth int) (int, error) {
	if depth >= MaxItemDepth {
		return off, fmt.Errorf("%w: nesting deeper than %d at offset %d", ErrNotDeterministic, MaxItemDepth, off)
	}
	major, arg, next, err := ReadHead(b, off)
	if err != nil {
		return off, err
	}
	switch major {
	case MajorUint, MajorNeg:
		return next, nil
	case MajorBytes, MajorText:
		_, end, err := ReadString(b, off, major)
		return end, err
	case MajorArray:
		// Each element takes at least one byte: a count beyond what is left
		// is refused before looping on it.
		if arg > uint64(len(b)-next) {
			return off, fmt.Errorf("%w: array at offset %d runs past the end", ErrNotDeterministic, off)
		}
		for i := uint64(0); i < arg; i++ {
			if next, err = skipItem(b, next, depth+1); err != nil {
				return off, err
			}
		}
		return next, nil
	case MajorMap:
		if arg > uint64(len(b)-next)/2 {
			return off, fmt.Errorf("%w: map at offset %d runs past the end", ErrNotDeterministic, off)
		}
		var prevKey []byte
		for i := uint64(0); i < arg; i++ {
			kEnd, err := skipItem(b, next, depth+1)
			if err != nil {
				return off, err
			}
			key := b[next:kEnd]
			if i > 0 && CompareKeys(prevKey, key) >= 0 {
				return off, fmt.Errorf("%w: map keys at offset %d are unsorted or duplicated", ErrNotDeterministic, next)
			}
			prevKey = key
			if next, err = skipItem(b, kEnd, depth+1); err != nil {
				return off, err
			}
		}
		return next, nil
	case MajorTag:
		return off, fmt.Errorf("%w: tag at offset %d (no tags inside signed payloads)", ErrNotDeterministic, off)
	default:
		return off, fmt.Errorf("%w: float, boolean, null or simple value at offset %d", ErrNotDeterministic, off)
	}
}

// CompareKeys orders two encoded map keys bytewise (RFC 8949 §4.2.1).
func CompareKeys(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// AppendHead appends the shortest-form head of a data item.
func AppendHead(b []byte, major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(b, m|byte(arg))
	case arg <= 0xff:
		return append(b, m|24, byte(arg))
	case arg <= 0xffff:
		return append(b, m|25, byte(arg>>8), byte(arg))
	case arg <= 0xffffffff:
		return append(b, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	default:
		return append(b, m|27, byte(arg>>56), byte(arg>>48), byte(arg>>40), byte(arg>>32),
			byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
}

// AppendText appends s as a definite-length text string.
func AppendText(b []byte, s string) []byte {
	return append(AppendHead(b, MajorText, uint64(len(s))), s...)
}

// AppendBytes appends p as a definite-length byte string.
func AppendBytes(b, p []byte) []byte {
	return append(AppendHead(b, MajorBytes, uint64(len(p))), p...)
}

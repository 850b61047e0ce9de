package wire

import (
	"errors"
	"fmt"
)

// ErrHex is wrapped by every refusal of a hex string. PROFILE.md §2 makes
// hex lower case only, so that one value has one text form: upper-case
// digits would give a receipt or grant a second encoding of the same id.
var ErrHex = errors.New("not lower-case hex")

// DecodeHex fills dst from s, which must be exactly 2·len(dst) lower-case
// hex characters. It is the one hex parser for everything mesh/1 signs.
func DecodeHex(dst []byte, s string) error {
	if len(s) != 2*len(dst) {
		return fmt.Errorf("%w: want %d characters, got %d", ErrHex, 2*len(dst), len(s))
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 {
			return fmt.Errorf("%w: bad character %q at position %d", ErrHex, s[2*i], 2*i)
		}
		if !ok2 {
			return fmt.Errorf("%w: bad character %q at position %d", ErrHex, s[2*i+1], 2*i+1)
		}
		dst[i] = hi<<4 | lo
	}
	return nil
}

// ParseHex decodes s, which must be exactly 2·n lower-case hex characters.
func ParseHex(s string, n int) ([]byte, error) {
	b := make([]byte, n)
	if err := DecodeHex(b, s); err != nil {
		return nil, err
	}
	return b, nil
}

// IsLowerHex reports whether s is exactly 2·n lower-case hex characters,
// without allocating.
func IsLowerHex(s string, n int) bool {
	if len(s) != 2*n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if _, ok := nibble(s[i]); !ok {
			return false
		}
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

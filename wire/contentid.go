package wire

import (
	"encoding/hex"
	"fmt"

	"lukechampine.com/blake3"
)

// ContentID is a BLAKE3-256 digest used as a content address.
type ContentID [32]byte

// ContentOf returns the content id of b.
func ContentOf(b []byte) ContentID {
	return ContentID(blake3.Sum256(b))
}

// String returns the lower-case hex form used on the wire.
func (c ContentID) String() string { return hex.EncodeToString(c[:]) }

// IsZero reports whether c is the all-zero id, which no real content has in
// practice and which this package uses as "absent".
func (c ContentID) IsZero() bool { return c == ContentID{} }

// ParseContentID parses a content id written as 64 lower-case hex
// characters; upper case is refused (PROFILE.md §2).
func ParseContentID(s string) (ContentID, error) {
	var c ContentID
	if err := DecodeHex(c[:], s); err != nil {
		return ContentID{}, fmt.Errorf("content id %q: %w", s, err)
	}
	return c, nil
}

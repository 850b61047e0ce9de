package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseHexRefusesUpperCase(t *testing.T) {
	id := ContentOf([]byte("abc"))
	cases := []struct {
		in string
		ok bool
	}{
		{id.String(), true},
		{strings.ToUpper(id.String()), false},
		{id.String()[:63] + "A", false},
		{id.String()[:62], false},
		{id.String() + "00", false},
	}
	for _, c := range cases {
		_, err := ParseContentID(c.in)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrHex)) {
			t.Errorf("ParseContentID(%q) = %v, want ok=%v", c.in, err, c.ok)
		}
		if IsLowerHex(c.in, 32) != c.ok {
			t.Errorf("IsLowerHex(%q) != %v", c.in, c.ok)
		}
	}
}

// A request in any form but its deterministic encoding would be checked
// under one id and hashed by a receiver under another.
func TestRequestRefusesNonDeterministicEncodings(t *testing.T) {
	good, err := validRequest().MarshalCBOR()
	if err != nil {
		t.Fatal(err)
	}
	// good is a5, then "max_tokens" 08 first (shortest key).
	mt := AppendText(nil, "max_tokens")
	i := bytes.Index(good, mt) + len(mt)
	padded := append(append(bytes.Clone(good[:i]), 0x18, 0x08), good[i+1:]...)
	k1End, _ := SkipItem(good, 1)
	v1End, _ := SkipItem(good, k1End)
	k2End, _ := SkipItem(good, v1End)
	v2End, _ := SkipItem(good, k2End)
	swapped := append(append(append(bytes.Clone(good[:1]), good[v1End:v2End]...), good[1:v1End]...), good[v2End:]...)
	cases := map[string][]byte{
		"integer not shortest": padded,
		"keys unsorted":        swapped,
		"trailing byte":        append(bytes.Clone(good), 0),
	}
	for name, b := range cases {
		var r ServeRequest
		if err := r.UnmarshalCBOR(b); err == nil || !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	var r ServeRequest
	if err := r.UnmarshalCBOR(good); err != nil {
		t.Fatalf("canonical request refused: %v", err)
	}
}

func TestSkipItem(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		ok   bool
	}{
		{"uint", []byte{0x18, 0x18}, true},
		{"uint not shortest", []byte{0x18, 0x17}, false},
		{"negative", []byte{0x20}, true},
		{"nested", []byte{0xa2, 0x61, 'a', 0x80, 0x62, 'a', 'a', 0x41, 0x00}, true},
		{"map keys unsorted", []byte{0xa2, 0x62, 'a', 'a', 0x00, 0x61, 'b', 0x00}, false},
		{"map keys duplicated", []byte{0xa2, 0x61, 'a', 0x00, 0x61, 'a', 0x00}, false},
		{"indefinite array", []byte{0x9f, 0xff}, false},
		{"float", []byte{0xf9, 0x3c, 0x00}, false},
		{"true", []byte{0xf5}, false},
		{"tag", []byte{0xc0, 0x00}, false},
		{"bad UTF-8", []byte{0x61, 0xff}, false},
		{"huge count", []byte{0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false},
		{"too deep", append(bytes.Repeat([]byte{0x81}, MaxItemDepth), 0x00), false},
	}
	for _, c := range cases {
		end, err := SkipItem(c.in, 0)
		if ok := err == nil && end == len(c.in); ok != c.ok {
			t.Errorf("%s: end %d err %v, want ok=%v", c.name, end, err, c.ok)
		}
	}
	for _, n := range []uint64{0, 23, 24, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		b := AppendHead(nil, MajorUint, n)
		if m, v, end, err := ReadHead(b, 0); err != nil || m != MajorUint || v != n || end != len(b) {
			t.Errorf("%d does not round-trip: %x %v", n, b, err)
		}
	}
}

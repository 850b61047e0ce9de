package rag

import (
	"encoding/binary"
	"strings"
	"testing"
)

// ruleVerdicts are the verdicts macula's reference decoder,
// macula_record_cbor:decode_strict/1, gives these inputs, as macula-go pins
// them (cbor/decoding_rule_reference_test.go). Only accept or refuse
// matters here: every refusal is malformed to a caller of this package.
var ruleVerdicts = []struct {
	name   string
	hex    string
	accept bool
}{
	{"duplicate key at the top level", "a2616101616102", false},
	{"duplicate key in a nested map", "a16162a2616101616102", false},
	{"duplicate key in a map in an array", "81a2616101616102", false},
	{"bytes after the top-level item", "a161610100", false},
	{"bytes after a nested item", "810000", false},
	{"truncated input", "a26161", false},
	{"empty input", "", false},
	{"invalid UTF-8 in a text value", "a1616161ff", false},
	{"invalid UTF-8 in a text key", "a161ff01", false},
	{"valid multibyte text", "a1616b65636166c3a9", true},
	{"a UTF-16 surrogate in text", "63eda080", false},
	{"an overlong NUL in text", "62c080", false},
	{"a code point above U+10FFFF", "64f4908080", false},
	{"the noncharacter U+FFFE", "63efbfbe", true},
	{"a byte string key", "a1416101", false},
	{"a float key", "a1f93ff001", false},
	{"an array key", "a18001", false},
	{"a map key", "a1a001", false},
	{"a null key", "a1f601", false},
	{"integer keys 1 and -1", "a201022003", true},
	{"integer keys -1 and 0, unsorted", "a220010002", true},
	{"a duplicate integer key", "a201020103", false},
	{"the empty text key twice", "a260016002", false},
	{"a text key in two widths", "a261610178016102", false},
	{"an unsigned key in two widths", "a20101180102", false},
	{"a negative key in two widths", "a22001380002", false},
	{"a half float value", "81f93e00", true},
	{"negative zero, half width", "f98000", true},
	{"the smallest half subnormal", "f90001", true},
	{"64 nested arrays", strings.Repeat("81", 64) + "00", true},
	{"65 nested arrays", strings.Repeat("81", 65) + "00", false},
	{"65 containers, the innermost an empty map", strings.Repeat("81", 64) + "a0", false},
	{"a map whose value is 63 arrays deep", "a16161" + strings.Repeat("81", 63) + "00", true},
	{"a map whose value is 64 arrays deep", "a16161" + strings.Repeat("81", 64) + "00", false},
	{"the smallest integer, -2^63", "3b7fffffffffffffff", true},
	{"an integer below -2^63", "3b8000000000000000", false},
	{"the largest integer, 2^63-1", "1b7fffffffffffffff", true},
	{"an integer above 2^63-1", "1b8000000000000000", false},
	{"positive infinity, half width", "f97c00", false},
	{"NaN, half width", "f97e00", false},
	{"negative infinity, single width", "faff800000", false},
	{"NaN, double width", "fb7ff8000000000000", false},
	{"an indefinite byte string", "5f4161ff", false},
	{"an indefinite array", "9f01ff", false},
	{"an indefinite map", "bf616101ff", false},
	{"a lone break byte", "ff", false},
	{"additional info 28", "1c", false},
	{"a byte string longer than the input", "4200", false},
	{"a text length of 2^64-1", "7bffffffffffffffff", false},
	{"a map claiming 2^64-1 entries", "bbffffffffffffffff", false},
	{"an array claiming 2^32-1 items", "9affffffff", false},
	{"a byte string length in eight bytes", "5b000000000000000100", true},
	{"tag 0 on text", "c060", false},
	{"tag 2, a bignum", "c24101", false},
	{"simple value 0", "e0", false},
	{"false", "f4", false},
	{"true", "f5", false},
	{"undefined", "f7", false},
	{"simple value 32", "f820", false},
	{"null", "f6", true},
}

func TestDecodingRuleMatchesMacula(t *testing.T) {
	for _, c := range ruleVerdicts {
		t.Run(c.name, func(t *testing.T) {
			err := checkDecodingRule(mustHex(t, c.hex))
			if c.accept && err != nil {
				t.Fatalf("0x%s: %v, macula accepts it", c.hex, err)
			}
			if !c.accept && err == nil {
				t.Fatalf("0x%s: accepted, macula refuses it", c.hex)
			}
			// What the rule accepts, fxamacker/cbor must decode.
			if c.accept {
				if _, err := decodeStrict(mustHex(t, c.hex)); err != nil {
					t.Fatalf("0x%s: accepted by the rule, then %v", c.hex, err)
				}
			}
		})
	}
}

// The element budget counts every item once: 131,072 pass, 131,073 do not.
func TestDecodingRuleElementBudget(t *testing.T) {
	array := func(count int) []byte {
		out := binary.BigEndian.AppendUint32([]byte{0x9a}, uint32(count))
		return append(out, make([]byte, count)...)
	}
	if err := checkDecodingRule(array(131071)); err != nil {
		t.Fatalf("131,072 items: %v", err)
	}
	if err := checkDecodingRule(array(131072)); err == nil {
		t.Fatal("131,073 items accepted")
	}
}

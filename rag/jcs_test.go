package rag

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// The contract's canonical JSON vector, byte for byte.
func TestCanonicalContractVector(t *testing.T) {
	in := `{"b": {"c": "q\"b\\s\n\u0001é/"}, "a": [1, "x"]}`
	want := `{"a":[1,"x"],"b":{"c":"q\"b\\s\n\u0001é/"}}`
	got, err := Canonical([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// RFC 8785 §3.2.2's example and §3.2.3's sorting example.
func TestCanonicalRFC8785Examples(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{
			"§3.2.2 values",
			`{
			  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
			  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
			  "literals": [null, true, false]
			}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			// UTF-16 code-unit order: the emoji (a surrogate pair, 0xD83D...)
			// sorts before U+FB33, though its code point is larger.
			"§3.2.3 sorting",
			`{
			  "\u20ac": "Euro Sign",
			  "\r": "Carriage Return",
			  "\ufb33": "Hebrew Letter Dalet With Dagesh",
			  "1": "One",
			  "\ud83d\ude00": "Emoji: Grinning Face",
			  "\u0080": "Control",
			  "\u00f6": "Latin Small Letter O With Diaeresis"
			}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"emoji vs U+FFFF-range key", `{"\uffff":1,"\ud83d\ude00":2}`, "{\"😀\":2,\"\uffff\":1}"},
		{"escapes kept minimal", `"\u0000\u001f\u007f\/\u00e9\b\f\t"`, "\"\\u0000\\u001f\u007f/é\\b\\f\\t\""},
		{"whitespace dropped", " [ 1 , { } , [ ] , \"\" ] \n", `[1,{},[],""]`},
		{"a high-low pair", `"\uD834\uDD1E"`, `"𝄞"`},
		{"escaped and literal key are one key order", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"scalar at top level", `-0`, `0`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonical([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

// RFC 8785 Appendix B's number table (IEEE 754 bits → ES serialisation), and
// the examples the brief names.
func TestCanonicalNumbers(t *testing.T) {
	bits := []struct{ hex, want string }{
		{"0000000000000000", "0"},
		{"8000000000000000", "0"},
		{"0000000000000001", "5e-324"},
		{"8000000000000001", "-5e-324"},
		{"7fefffffffffffff", "1.7976931348623157e+308"},
		{"ffefffffffffffff", "-1.7976931348623157e+308"},
		{"4340000000000000", "9007199254740992"},
		{"c340000000000000", "-9007199254740992"},
		{"4430000000000000", "295147905179352830000"},
		{"44b52d02c7e14af5", "9.999999999999997e+22"},
		{"44b52d02c7e14af6", "1e+23"},
		{"44b52d02c7e14af7", "1.0000000000000001e+23"},
		{"444b1ae4d6e2ef4e", "999999999999999700000"},
		{"444b1ae4d6e2ef4f", "999999999999999900000"},
		{"444b1ae4d6e2ef50", "1e+21"},
		{"3eb0c6f7a0b5ed8c", "9.999999999999997e-7"},
		{"3eb0c6f7a0b5ed8d", "0.000001"},
		{"41b3de4355555553", "333333333.3333332"},
		{"41b3de4355555554", "333333333.33333325"},
		{"41b3de4355555555", "333333333.3333333"},
		{"41b3de4355555556", "333333333.3333334"},
		{"41b3de4355555557", "333333333.33333343"},
		{"becbf647612f3696", "-0.0000033333333333333333"},
		{"43143ff3c1cb0959", "1424953923781206.2"},
	}
	for _, c := range bits {
		u, err := strconv.ParseUint(c.hex, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		got, err := CanonicalValue(math.Float64frombits(u))
		if err != nil {
			t.Fatalf("%s: %v", c.hex, err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.hex, got, c.want)
		}
	}
	literals := []struct{ in, want string }{
		{"1e21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"1e-7", "1e-7"},
		{"0.000001", "0.000001"},
		{"333333333.33333329", "333333333.3333333"},
		{"1.7976931348623157e+308", "1.7976931348623157e+308"},
		{"5e-324", "5e-324"},
		{"-0", "0"},
		{"-0.0e-5", "0"},
		{"1e-400", "0"}, // underflows to 0, as JSON.parse says
		{"9007199254740992", "9007199254740992"},
		{"9007199254740993", "9007199254740992"}, // 2^53+1 has no double
		{"4.50", "4.5"},
		{"1E+2", "100"},
		{"123456789012345680000", "123456789012345680000"},
		{"0.1", "0.1"},
		{"-1.5e-9", "-1.5e-9"},
	}
	for _, c := range literals {
		got, err := Canonical([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.in, got, c.want)
		}
	}
}

func TestCanonicalRefusals(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want error
	}{
		{"number past the double range", `1e400`, ErrNumberOutOfRange},
		{"negative number past the range", `[-1e309]`, ErrNumberOutOfRange},
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateKey},
		{"duplicate key, one escaped", `{"a":1,"\u0061":2}`, ErrDuplicateKey},
		{"duplicate key deep", `[{"x":{"k":1,"k":1}}]`, ErrDuplicateKey},
		{"lone high surrogate", `"\ud800"`, ErrLoneSurrogate},
		{"high surrogate then text", `"\ud800x"`, ErrLoneSurrogate},
		{"high surrogate then non-low escape", `"\ud800\u0041"`, ErrLoneSurrogate},
		{"two high surrogates", `"\ud800\ud800"`, ErrLoneSurrogate},
		{"lone low surrogate", `"\udc00"`, ErrLoneSurrogate},
		{"lone surrogate in a key", `{"\udfff":1}`, ErrLoneSurrogate},
		{"invalid UTF-8 byte", "\"\xff\"", ErrInvalidUTF8},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", ErrInvalidUTF8},
		{"overlong UTF-8", "\"\xc0\x80\"", ErrInvalidUTF8},
		{"truncated UTF-8", "\"\xe2\x82\"", ErrInvalidUTF8},
		{"trailing data", `{} {}`, ErrTrailingData},
		{"trailing garbage", `1 x`, ErrTrailingData},
		{"empty input", ``, ErrJSONSyntax},
		{"NaN literal", `NaN`, ErrJSONSyntax},
		{"Infinity literal", `Infinity`, ErrJSONSyntax},
		{"leading zero", `01`, ErrJSONSyntax},
		{"bare minus", `-`, ErrJSONSyntax},
		{"dot without digits", `1.`, ErrJSONSyntax},
		{"plus sign", `+1`, ErrJSONSyntax},
		{"hex number", `0x10`, ErrTrailingData},
		{"unescaped control", "\"a\nb\"", ErrJSONSyntax},
		{"bad escape", `"\x"`, ErrJSONSyntax},
		{"short \\u", `"\u12"`, ErrJSONSyntax},
		{"single quotes", `'a'`, ErrJSONSyntax},
		{"trailing comma", `[1,]`, ErrJSONSyntax},
		{"unterminated", `{"a":1`, ErrJSONSyntax},
		{"non-string key", `{1:2}`, ErrJSONSyntax},
		{"byte order mark", "\ufeff{}", ErrJSONSyntax},
		{"too deep", strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ErrTooDeep},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonical([]byte(c.in))
			if !errors.Is(err, c.want) {
				t.Fatalf("Canonical(%q) = %q, %v; want %v", c.in, got, err, c.want)
			}
		})
	}
	// MaxDepth itself is accepted.
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if _, err := Canonical([]byte(deep)); err != nil {
		t.Fatalf("%d levels: %v", MaxDepth, err)
	}
}

func TestCanonicalValue(t *testing.T) {
	good := []struct {
		name string
		v    any
		want string
	}{
		{"nested", map[string]any{"z": []any{int64(-3), uint64(7), 1.5, json.Number("1E3"), nil, true}, "a": "x"},
			`{"a":"x","z":[-3,7,1.5,1000,null,true]}`},
		{"2^53", int64(1 << 53), "9007199254740992"},
		{"-2^53", int64(-(1 << 53)), "-9007199254740992"},
		{"int", 384, "384"},
		{"empty list", []any{}, "[]"},
		{"empty map", map[string]any{}, "{}"},
	}
	for _, c := range good {
		got, err := CanonicalValue(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	bad := []struct {
		name string
		v    any
		want error
	}{
		{"NaN", math.NaN(), ErrNumberOutOfRange},
		{"+Inf", math.Inf(1), ErrNumberOutOfRange},
		{"int64 past 2^53", int64(1<<53 + 1), ErrNumberOutOfRange},
		{"int64 below -2^53", int64(-(1 << 53) - 1), ErrNumberOutOfRange},
		{"uint64 past 2^53", uint64(1 << 60), ErrNumberOutOfRange},
		{"json.Number out of range", json.Number("1e999"), ErrNumberOutOfRange},
		{"json.Number not a number", json.Number("12abc"), ErrJSONSyntax},
		{"invalid UTF-8 string", "\xff", ErrInvalidUTF8},
		{"invalid UTF-8 key", map[string]any{"\xff": 1}, ErrInvalidUTF8},
		{"unsupported type", struct{}{}, ErrUnsupportedType},
		{"unsupported nested", []any{int32(1)}, ErrUnsupportedType},
	}
	for _, c := range bad {
		if got, err := CanonicalValue(c.v); !errors.Is(err, c.want) {
			t.Errorf("%s: got %q, %v; want %v", c.name, got, err, c.want)
		}
	}
}

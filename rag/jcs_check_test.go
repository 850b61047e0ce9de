package rag

import (
	"bytes"
	"strings"
	"testing"
)

// canonicalCases are texts on both sides of every rule IsCanonical reads
// the other way.
var canonicalCases = []struct {
	in   string
	want bool
}{
	{`{"a":[1,"x",true,false,null],"b":{"c":"d"}}`, true},
	{`{}`, true}, {`[]`, true}, {`""`, true}, {`0`, true}, {`-1`, true}, {`null`, true},
	{` {}`, false}, {`{} `, false}, {"{}\n", false}, {`{"a": 1}`, false}, {`[1, 2]`, false},
	{`{"b":1,"a":2}`, false}, {`{"a":1,"a":2}`, false}, {`{"a":1,"b":2}`, true},
	{`{"A":1,"a":2}`, true}, {`{"a":1,"A":2}`, false},
	// UTF-16 order: the emoji (0xD83D...) before U+FB33 and U+FFFF.
	{"{\"\\r\":1,\"1\":2,\"\u0080\":3,\"ö\":4,\"€\":5,\"😀\":6,\"\ufb33\":7}", true},
	{"{\"\uffff\":1,\"😀\":2}", false}, {"{\"😀\":2,\"\uffff\":1}", true},
	{`{"\n":1,"\t":2}`, false}, {`{"\t":1,"\n":2}`, true},
	{`"q\"b\\s\n\u0001é/"`, true}, {`"\/"`, false}, {`"\u0041"`, false}, {`"\u000A"`, false},
	{`"\u000a"`, false}, {`"\u001f"`, true}, {`"\u001F"`, false}, {`"\u007f"`, false}, {"\"\u007f\"", true},
	{`"\b\f\n\r\t"`, true}, {`"\u0008"`, false}, {"\"\t\"", false}, {`"\ud83d\ude00"`, false}, {`"😀"`, true},
	{"\"\xff\"", false}, {"\"\xed\xa0\x80\"", false}, {`"abc`, false}, {`"\`, false}, {`"\u00`, false},
	{`1.5`, true}, {`1.50`, false}, {`1e+30`, true}, {`1E30`, false}, {`1e30`, false}, {`0.002`, true},
	{`2e-3`, false}, {`1e-7`, true}, {`-0`, false}, {`0.0`, false}, {`01`, false}, {`1e400`, false},
	{`333333333.3333333`, true}, {`333333333.33333329`, false}, {`999999999999999`, true},
	{`9007199254740992`, true}, {`9007199254740993`, false}, {`1000000000000000000000`, false}, {`1e+21`, true},
	{`-`, false}, {`1-`, false}, {`tru`, false}, {`true1`, false}, {`nul`, false}, {`[1,]`, false}, {`{"a":}`, false},
	{`{"a"}`, false}, {`{,}`, false}, {`[`, false}, {`{"a":1`, false}, {``, false},
	{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), true},
	{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), false},
}

// TestIsCanonical: IsCanonical says true exactly where Canonical returns
// the text itself.
func TestIsCanonical(t *testing.T) {
	for _, c := range canonicalCases {
		out, err := Canonical([]byte(c.in))
		fixed := err == nil && bytes.Equal(out, []byte(c.in))
		if fixed != c.want {
			t.Errorf("%.60q: the case says canonical %v, Canonical says %v (%q, %v)", c.in, c.want, fixed, out, err)
		}
		if got := IsCanonical([]byte(c.in)); got != c.want {
			t.Errorf("IsCanonical(%.60q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzIsCanonical: IsCanonical(x) is exactly Canonical(x) == x, and the
// canonical form of anything Canonical accepts is canonical.
func FuzzIsCanonical(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c.in))
	}
	f.Add([]byte(contractDescriptionJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Canonical(data)
		if got, want := IsCanonical(data), err == nil && bytes.Equal(out, data); got != want {
			t.Fatalf("IsCanonical(%q) = %v; Canonical gives %q, %v", data, got, out, err)
		}
		if err == nil && !IsCanonical(out) {
			t.Fatalf("IsCanonical(Canonical(%q) = %q) is false", data, out)
		}
	})
}

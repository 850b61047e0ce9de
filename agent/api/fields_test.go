package api

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Fields encode to the very bytes encoding/json makes of the same
// map[string]any, escaping HTML or not.
func TestFieldsEncodeAsMap(t *testing.T) {
	sd := sealedForReply(t)
	cases := []struct {
		name string
		m    map[string]any
	}{
		{"a sealed receipt", ReceiptFields(sd.Receipt)},
		{"empty", map[string]any{}},
		{"nil", nil},
		{"scalars", map[string]any{"b": uint64(1<<64 - 1), "a": uint32(7), "c": uint8(0), "d": int64(-3), "e": true, "f": false, "g": nil, "h": 12, "i": uint16(9)}},
		{"strings", map[string]any{"quote": `say "hi"`, "back": `a\b`, "html": "<a href='x'>&</a>", "ctl": "tab\there\nnl\x01", "uni": "µJ per token — ok", "sep": "line\u2028para\u2029", "bad": "\xff\xfeok", "empty": ""}},
		{"keys escaped", map[string]any{"k\"ey": 1, "<k>": 2, "ü": 3, "": 4}},
		{"other values", map[string]any{"bytes": []byte{1, 2, 3}, "list": []any{uint64(1), "two"}, "float": 1.5, "map": map[string]any{"z": 1, "a": "<"}}},
	}
	for _, c := range cases {
		for _, html := range []bool{false, true} {
			enc := func(v any) []byte {
				var buf bytes.Buffer
				e := json.NewEncoder(&buf)
				e.SetEscapeHTML(html)
				if err := e.Encode(v); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				return buf.Bytes()
			}
			want := enc(c.m)
			got := enc(Fields(c.m))
			if !bytes.Equal(got, want) {
				t.Errorf("%s (escape HTML %v):\n got %s\nwant %s", c.name, html, got, want)
			}
			if got := enc(struct {
				R Fields `json:"r"`
			}{c.m}); !bytes.Equal(got, enc(struct {
				R map[string]any `json:"r"`
			}{c.m})) {
				t.Errorf("%s (escape HTML %v) as a field: %s", c.name, html, got)
			}
		}
	}
}

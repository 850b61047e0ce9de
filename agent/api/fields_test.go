package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"meshd/agent"
	"meshd/steward"
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

// A serve's reply written straight from the receipt is byte for byte what
// encoding/json makes of serveReply, whatever the output text holds, with
// a settling error or without, with route candidates or without.
func TestServeReplyBytes(t *testing.T) {
	sd := sealedForReply(t)
	bare := *sd
	r := *sd.Receipt
	r.RouteCandidates = nil
	bare.Receipt = &r
	for _, c := range []struct {
		name     string
		sealed   *steward.Sealed
		output   string
		settling error
	}{
		{"plain", sd, "four tokens out", nil},
		{"escapes", sd, "a \"quote\", a \\ and <html> & \u2028 µ\n\t\x01 \xff", nil},
		{"empty output", sd, "", nil},
		{"settling error", sd, "out", errors.New(`ledger said "no" <now>`)},
		{"no route candidates", &bare, "out", nil},
	} {
		resp := &agent.Response{Sealed: c.sealed, Output: []byte(c.output)}
		got, err := appendServeReply(nil, resp, c.settling)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if want := encodeJSONBytes(t, newServeReply(resp, c.settling)); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
}

// A receipt with foreign extensions is written as its map is.
func TestReceiptFieldsForeign(t *testing.T) {
	sd := sealedForReply(t)
	r := *sd.Receipt
	r.Foreign = []steward.Extension{{Key: "x_zeta", Value: []byte{0x03}}, {Key: "a_first", Value: []byte("<x>")}}
	got, err := appendReceiptFields(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.TrimSuffix(encodeJSONBytes(t, ReceiptFields(&r)), []byte("\n"))
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte(`"a_first":`)) {
		t.Errorf("got %s\nwant %s", got, want)
	}
}

func encodeJSONBytes(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

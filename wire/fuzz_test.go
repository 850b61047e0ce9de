package wire

import (
	"bytes"
	"testing"
)

func FuzzServeRequest(f *testing.F) {
	b, _ := validRequest().MarshalCBOR()
	f.Add(b)
	f.Add([]byte{0xa0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ServeRequest
		if err := r.UnmarshalCBOR(b); err != nil {
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded an invalid request: %v", err)
		}
		// Whatever decodes has exactly one identity: re-encoding is stable.
		again, err := r.MarshalCBOR()
		if err != nil {
			t.Fatal(err)
		}
		var r2 ServeRequest
		if err := r2.UnmarshalCBOR(again); err != nil || r2 != r {
			t.Fatalf("re-encoded request does not round-trip: %v", err)
		}
		if again2, _ := r2.MarshalCBOR(); !bytes.Equal(again, again2) {
			t.Fatal("encoding is not deterministic")
		}
	})
}

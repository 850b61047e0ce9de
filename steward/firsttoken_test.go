package steward

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// x_first_token_ns seals, encodes in its place among the keys and reads
// back; a time outside the serve, one without x_serve_ns to sit in, or one
// for a serve with no output is refused at seal and at verify.
func TestFirstTokenSealedAndChecked(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	ft := func(v uint64) *uint64 { return &v }

	d := draft(1)
	d.FirstTokenNs = ft(400) // the serve is 1000 ns
	r, err := st.Build(d, 0, nil, nonce, testClock())
	if err != nil {
		t.Fatal(err)
	}
	core, err := r.EncodeCore()
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic order: a 16-byte key after cache_hit_tokens and
	// before x_grant_debit_uj would be; after x_full_scale_uw (15 bytes).
	if i, j := bytes.Index(core, []byte("cache_hit_tokens")), bytes.Index(core, []byte("x_first_token_ns")); i < 0 || j < i {
		t.Fatalf("x_first_token_ns at %d, cache_hit_tokens at %d", j, i)
	}
	env, err := Sign1(k, core)
	if err != nil {
		t.Fatal(err)
	}
	o, err := OpenEnvelope(env, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	if o.Receipt.FirstTokenNs == nil || *o.Receipt.FirstTokenNs != 400 {
		t.Fatalf("read back x_first_token_ns %v", o.Receipt.FirstTokenNs)
	}
	if d := draft(2); true {
		r, err := st.Build(d, 0, nil, nonce, testClock())
		if err != nil || r.FirstTokenNs != nil {
			t.Fatalf("a draft without a first token: %v, x_first_token_ns %v", err, r.FirstTokenNs)
		}
	}

	for _, c := range []struct {
		name string
		mut  func(*Receipt)
		want Reason
		msg  string
	}{
		{"after the serve", func(r *Receipt) { r.FirstTokenNs = ft(1001) }, RefusedFieldValue, "exceeds x_serve_ns 1000"},
		{"at the serve's end", func(r *Receipt) { r.FirstTokenNs = ft(1000) }, "", ""},
		{"no output", func(r *Receipt) {
			r.FirstTokenNs, r.TokensOut, r.TokensAccepted, r.UJPerAcceptedToken = ft(10), 0, 0, nil
		}, RefusedFieldValue, "tokens_out 0"},
		// Another implementation's receipt, without meshd's metering group.
		{"no serve", func(r *Receipt) {
			r.FirstTokenNs = ft(10)
			r.Meter, r.MeterKind, r.WindowNs, r.ServeNs, r.SealedUnixMs = nil, nil, nil, nil, nil
		}, RefusedMissingField, "needs x_serve_ns"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := st.assemble(draft(3), 0, nil, nonce, testClock())
			if err != nil {
				t.Fatal(err)
			}
			c.mut(r)
			check := func(stage string, err error) {
				t.Helper()
				if c.want == "" {
					if err != nil {
						t.Fatalf("%s: %v", stage, err)
					}
					return
				}
				if got := ReasonOf(err); got != c.want || !errors.Is(err, ErrField) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("%s: reason %q (%v), want %q containing %q", stage, got, err, c.want, c.msg)
				}
			}
			check("CheckConforming", r.CheckConforming())
			core, err := r.EncodeCore()
			if err != nil {
				t.Fatal(err)
			}
			env, err := Sign1(k, core)
			if err != nil {
				t.Fatal(err)
			}
			_, err = OpenEnvelope(env, k.Public())
			check("open envelope", err)
		})
	}
	bad := draft(4)
	bad.FirstTokenNs = ft(5000)
	if _, err := st.Build(bad, 0, nil, nonce, testClock()); ReasonOf(err) != RefusedFieldValue {
		t.Fatalf("seal of a first token after the serve: %v", err)
	}
}

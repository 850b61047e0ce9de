package steward

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"meshd/wire"
)

// A forwarded serve's receipt names the upstream receipt and steward; both
// survive the envelope, and one without the other is refused.
func TestUpstreamFields(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r"), k, LogOptions{})
	defer l.Close()
	up := wire.ContentOf([]byte("upstream receipt"))
	other := testKey(t)
	d := draft(0)
	d.Upstream = &Upstream{Receipt: up, Steward: other.Public()}
	s, err := st.Seal(bg, d)
	if err != nil {
		t.Fatal(err)
	}
	o, err := OpenEnvelope(s.Envelope, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	if o.Receipt.UpstreamReceipt == nil || *o.Receipt.UpstreamReceipt != up.String() || *o.Receipt.UpstreamSteward != other.ID() {
		t.Fatalf("upstream fields after the envelope: %v %v", o.Receipt.UpstreamReceipt, o.Receipt.UpstreamSteward)
	}
	r := *o.Receipt
	r.UpstreamSteward = nil
	if err := r.Check(); !errors.Is(err, ErrField) || !strings.Contains(err.Error(), "together") {
		t.Fatalf("half an upstream: %v", err)
	}
	bad := "NOT-HEX"
	r.UpstreamSteward = &bad
	if err := r.Check(); !errors.Is(err, ErrField) {
		t.Fatalf("a malformed upstream steward: %v", err)
	}
}

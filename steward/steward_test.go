package steward

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/wire"
)

func testKey(t testing.TB) *Key {
	t.Helper()
	k, err := NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func draft(i int) Draft {
	return Draft{
		Request:  wire.ContentOf([]byte(fmt.Sprintf("request %d", i))),
		Backend:  "ref-mid",
		Recipe:   "reference/v1:work=64",
		Route:    "ref-mid: cheapest of 1 admissible",
		Outcome:  wire.ServeOutcome{TokensIn: 5, TokensOut: 10, TokensAccepted: 10},
		Floor:    wire.F1,
		Served:   wire.F2,
		Energy:   wire.Estimated(uint64(4500 + i)),
		Metering: wire.Metering{Meter: EstimatorMeter, Kind: wire.KindEstimator, WindowNs: 1000, ServeNs: 1000},
	}
}

func TestSealAndOpen(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r"), k, LogOptions{})
	defer l.Close()
	var prev wire.ContentID
	for i := 0; i < 3; i++ {
		s, err := st.Seal(context.Background(), draft(i))
		if err != nil {
			t.Fatal(err)
		}
		o, err := OpenEnvelope(s.Envelope, k.Public())
		if err != nil {
			t.Fatal(err)
		}
		r := o.Receipt
		if r.Sequence != uint64(i) {
			t.Errorf("sequence %d, want %d", r.Sequence, i)
		}
		if i == 0 && r.Prev != nil {
			t.Errorf("genesis receipt carries prev %s", *r.Prev)
		}
		if i > 0 && (r.Prev == nil || *r.Prev != prev.String()) {
			t.Errorf("receipt %d prev does not link to the previous envelope", i)
		}
		if o.ID != s.ID || o.ID != wire.ContentOf(s.Envelope) {
			t.Errorf("envelope id mismatch")
		}
		want := uint64(4500+i) / 10
		if r.UJPerAcceptedToken == nil || *r.UJPerAcceptedToken != want {
			t.Errorf("uj_per_accepted_token = %v, want %d", r.UJPerAcceptedToken, want)
		}
		if r.MeasuredUJ != nil || r.EnergyProvenance != "Estimator" || r.FidelityMet != 1 {
			t.Errorf("estimator receipt wrong: measured=%v prov=%s met=%d", r.MeasuredUJ, r.EnergyProvenance, r.FidelityMet)
		}
		prev = s.ID
	}
}

func TestBuildRefuses(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	measured := uint64(10)
	cases := []struct {
		name string
		mut  func(*Draft)
		want string
	}{
		{"zero energy", func(d *Draft) { d.Energy = wire.Energy{} }, "coupling"},
		{"model-based with measurement", func(d *Draft) { d.Energy = wire.Modelled(&measured, 20) }, "measured_uj cannot be sealed"},
		{"accepted over out", func(d *Draft) { d.Outcome.TokensAccepted = 11 }, "tokens_accepted"},
		{"spec accepted over proposed", func(d *Draft) { d.Outcome.SpecAccepted = 1 }, "spec_accepted"},
		{"no request", func(d *Draft) { d.Request = wire.ContentID{} }, "request_id"},
		{"no meter", func(d *Draft) { d.Metering.Meter = "" }, "meter"},
		{"no backend", func(d *Draft) { d.Backend = "" }, "backend"},
		{"floor outside scale", func(d *Draft) { d.Floor = 9 }, "fidelity_floor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := draft(1)
			c.mut(&d)
			_, err := st.Build(d, 0, nil, nonce, testClock())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Build error = %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestReceiptFieldRules(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	nonce := make([]byte, NonceSize)
	// Zero accepted tokens: the wedge metric must be absent.
	d := draft(1)
	d.Outcome = wire.ServeOutcome{TokensIn: 3}
	r, err := st.Build(d, 0, nil, nonce, testClock())
	if err != nil {
		t.Fatal(err)
	}
	if r.UJPerAcceptedToken != nil {
		t.Errorf("uj_per_accepted_token present with nothing accepted")
	}
	// HwShunt: measured_uj present, charged figure is the measurement.
	d = draft(1)
	d.Energy = wire.Measured(9999, 4500)
	d.Metering = hwMetering()
	d.Metering.ErrorUJ = 12
	r, err = st.Build(d, 0, nil, nonce, testClock())
	if err != nil {
		t.Fatal(err)
	}
	if r.MeasuredUJ == nil || *r.MeasuredUJ != 9999 || *r.UJPerAcceptedToken != 999 || r.ErrorUJ == nil || *r.ErrorUJ != 12 {
		t.Errorf("HwShunt receipt wrong: %+v", r)
	}
	// Tampering with the receipt after Build is caught by Check.
	muts := map[string]func(*Receipt){
		"drop measured":   func(r *Receipt) { r.MeasuredUJ = nil },
		"wrong wedge":     func(r *Receipt) { v := uint64(1); r.UJPerAcceptedToken = &v },
		"fidelity_met 2":  func(r *Receipt) { r.FidelityMet = 2 },
		"profile":         func(r *Receipt) { r.MeshReceipt = "mesh/2" },
		"prev at genesis": func(r *Receipt) { p := wire.ContentID{1}.String(); r.Prev = &p },
		"short nonce":     func(r *Receipt) { r.Nonce = "00" },
		"upper-case hex":  func(r *Receipt) { r.Steward = strings.ToUpper(r.Steward) },
		"bad provenance":  func(r *Receipt) { r.EnergyProvenance = "Guess" },
		"estimator+meas":  func(r *Receipt) { r.EnergyProvenance = "Estimator" },
		"bad request id":  func(r *Receipt) { r.RequestID = "abc" },
	}
	for name, m := range muts {
		c := *r
		m(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: Check accepted a broken receipt", name)
		}
	}
}

func TestDecodeCoreStrict(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	r, err := st.Build(draft(1), 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	core, err := r.EncodeCore()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeCore(core); err != nil {
		t.Fatalf("canonical core refused: %v", err)
	}
	// A map re-encoded with one value changed to a non-canonical form.
	generic := map[string]any{}
	if err := wire.DecMode().Unmarshal(core, &generic); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(map[string]any){
		"float":        func(m map[string]any) { m["tokens_in"] = 5.0 },
		"bool":         func(m map[string]any) { m["fidelity_met"] = true },
		"null":         func(m map[string]any) { m["grant_id"] = nil },
		"unknown key":  func(m map[string]any) { m["extra"] = uint64(1) },
		"missing key":  func(m map[string]any) { delete(m, "tokens_out") },
		"negative int": func(m map[string]any) { m["tokens_in"] = int64(-1) },
	}
	for name, mut := range bad {
		m := map[string]any{}
		for k, v := range generic {
			m[k] = v
		}
		mut(m)
		b, err := wire.EncMode().Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeCore(b); err == nil {
			t.Errorf("%s: DecodeCore accepted it", name)
		}
	}
	// Truncation at every length is refused without panicking.
	for n := 0; n < len(core); n++ {
		if _, err := DecodeCore(core[:n]); err == nil {
			t.Fatalf("truncated core of %d bytes accepted", n)
		}
	}
}

func TestEnvelopeTamperAndTruncation(t *testing.T) {
	k := testKey(t)
	st := New(k, nil, Options{})
	r, err := st.Build(draft(1), 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	core, _ := r.EncodeCore()
	env, err := Sign1(k, core)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenEnvelope(env, k.Public()); err != nil {
		t.Fatal(err)
	}
	for i := range env {
		bad := bytes.Clone(env)
		bad[i] ^= 0x01
		if _, err := OpenEnvelope(bad, k.Public()); err == nil {
			t.Fatalf("flipping a bit of byte %d went unnoticed", i)
		}
	}
	for n := 0; n < len(env); n++ {
		if _, err := OpenEnvelope(env[:n], nil); err == nil {
			t.Fatalf("envelope truncated to %d bytes accepted", n)
		}
	}
	other, _ := GenerateKey(rand.Reader)
	if _, err := OpenEnvelope(env, other.Public()); err == nil || !strings.Contains(err.Error(), "not by the trusted") {
		t.Fatalf("envelope accepted under another steward key: %v", err)
	}
	// Re-signed by another key but claiming the original steward.
	forged, _ := Sign1(other, core)
	if _, err := OpenEnvelope(forged, nil); err == nil || !errors.Is(err, ErrField) {
		t.Fatalf("steward/kid mismatch not refused: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "steward.key")
	k, _ := GenerateKey(rand.Reader)
	if err := WriteKeyFile(p, k); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	if err := WriteKeyFile(p, k); err == nil || !strings.Contains(err.Error(), "refusing to overwrite") {
		t.Fatalf("overwrote a key file: %v", err)
	}
	got, err := LoadKeyFile(p)
	if err != nil || got.ID() != k.ID() {
		t.Fatalf("reload: %v", err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyFile(p); err == nil || !strings.Contains(err.Error(), "too open") {
		t.Fatalf("loose key accepted: %v", err)
	}
	garbage := filepath.Join(dir, "garbage.key")
	os.WriteFile(garbage, []byte("not a key"), 0o600)
	if _, err := LoadKeyFile(garbage); err == nil {
		t.Fatal("garbage key accepted")
	}
}

// A serve asks Storage before any work: an Admit that refuses (a disk
// budget with nothing left to archive) refuses it there, as a log that
// refuses writes does, not only at the seal after the engine ran.
func TestStorageAsksAdmit(t *testing.T) {
	k := testKey(t)
	_, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "receipts"), k, LogOptions{NoSync: true, CheckpointEvery: -1})
	defer l.Close()
	full := fmt.Errorf("%w: the log is at its budget", ErrStorage)
	var refuse error
	st := New(k, l, Options{Admit: func() error { return refuse }})
	if err := st.Storage(); err != nil {
		t.Fatalf("storage with room: %v", err)
	}
	refuse = full
	if err := st.Storage(); !errors.Is(err, ErrStorage) {
		t.Fatalf("storage at the budget: %v, want ErrStorage", err)
	}
}

// A seal says where its time went, and its parts fit within it.
func TestSealTimes(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r"), k, LogOptions{})
	defer l.Close()
	for i := range 3 {
		t0 := time.Now()
		s, err := st.Seal(context.Background(), draft(i))
		el := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		tk := s.Took
		if tk.Build <= 0 || tk.Sign <= 0 || tk.Write <= 0 || tk.Fsync <= 0 {
			t.Fatalf("seal %d: times %+v, want each positive", i, tk)
		}
		if sum := tk.Build + tk.Sign + tk.Write + tk.Fsync; sum > el {
			t.Fatalf("seal %d: parts %+v add up to %v, more than the seal's %v", i, tk, sum, el)
		}
	}
}

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
	"sync"
	"testing"

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
		Metering: wire.Metering{Meter: "estimator", WindowNs: 1000},
	}
}

func openTestLog(t testing.TB, path string, k *Key) (*Steward, *Log, *ScanReport) {
	t.Helper()
	l, rep, err := OpenLog(path, LogOptions{Trusted: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	return New(k, l, Options{}), l, rep
}

// writeLog seals n receipts into a new log and returns its path and the
// byte offsets at which each frame starts.
func writeLog(t testing.TB, n int) (string, []int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "receipts.log")
	k := testKey(t)
	st, l, _ := openTestLog(t, path, k)
	var offs []int64
	off := int64(len(logMagic))
	for i := 0; i < n; i++ {
		s, err := st.Seal(context.Background(), draft(i))
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
		off += int64(frameHeader + len(s.Envelope))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, offs
}

func TestSealAndOpen(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r.log"), k)
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
	d.Metering = wire.Metering{Meter: "ina226@i2c-1:0x40", WindowNs: 5e6, ErrorUJ: 12, Samples: 20, MaxGapNs: 300000}
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
		"unknown key":  func(m map[string]any) { m["x_extra"] = uint64(1) },
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
	env, err := SealCore(k, core)
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
	forged, _ := SealCore(other, core)
	if _, err := OpenEnvelope(forged, nil); err == nil || !errors.Is(err, ErrField) {
		t.Fatalf("steward/kid mismatch not refused: %v", err)
	}
}

func TestLogReopenContinues(t *testing.T) {
	path, _ := writeLog(t, 5)
	k := testKey(t)
	st, l, rep := openTestLog(t, path, k)
	if rep.Records != 5 || rep.TornBytes != 0 {
		t.Fatalf("reopen report %+v", rep)
	}
	s, err := st.Seal(context.Background(), draft(5))
	if err != nil {
		t.Fatal(err)
	}
	if s.Receipt.Sequence != 5 || *s.Receipt.Prev != rep.Head.String() {
		t.Fatalf("after reopen got sequence %d prev %v, want 5 linking to %s", s.Receipt.Sequence, s.Receipt.Prev, rep.Head)
	}
	l.Close()
	v, err := VerifyLogFile(path, k.Public(), nil)
	if err != nil || v.Records != 6 {
		t.Fatalf("verify after reopen: %v %+v", err, v)
	}
}

func TestLogTornTailIsCut(t *testing.T) {
	for _, cut := range []int{1, 4, 8, 9, 50} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			path, offs := writeLog(t, 4)
			fi, _ := os.Stat(path)
			last := fi.Size() - offs[3]
			if int64(cut) >= last {
				t.Skip("frame shorter than cut")
			}
			// A power cut mid-write leaves a prefix of the final frame.
			if err := os.Truncate(path, offs[3]+int64(cut)); err != nil {
				t.Fatal(err)
			}
			k := testKey(t)
			st, l, rep := openTestLog(t, path, k)
			if rep.Records != 3 || rep.TornBytes != int64(cut) || rep.TornAt != offs[3] {
				t.Fatalf("report %+v, want 3 records and a torn tail of %d at %d", rep, cut, offs[3])
			}
			if fi, _ := os.Stat(path); fi.Size() != offs[3] {
				t.Fatalf("torn tail not cut: size %d, want %d", fi.Size(), offs[3])
			}
			s, err := st.Seal(context.Background(), draft(9))
			if err != nil || s.Receipt.Sequence != 3 {
				t.Fatalf("append after recovery: %v seq %v", err, s)
			}
			l.Close()
			if v, err := VerifyLogFile(path, k.Public(), nil); err != nil || v.Records != 4 {
				t.Fatalf("verify after recovery: %v", err)
			}
		})
	}
}

func TestLogDamageRefused(t *testing.T) {
	path, offs := writeLog(t, 6)
	orig, _ := os.ReadFile(path)
	frame := func(i int) []byte {
		end := int64(len(orig))
		if i+1 < len(offs) {
			end = offs[i+1]
		}
		return orig[offs[i]:end]
	}
	splice := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name    string
		content []byte
		seq     uint64
	}{
		{"flipped byte in record 3 body", func() []byte {
			b := bytes.Clone(orig)
			b[offs[3]+40] ^= 0x20
			return b
		}(), 3},
		{"flipped byte in record 2 length", func() []byte {
			b := bytes.Clone(orig)
			b[offs[2]] ^= 0x80
			return b
		}(), 2},
		{"record 2 removed", splice(orig[:offs[2]], orig[offs[3]:]), 2},
		{"records 3 and 4 swapped", splice(orig[:offs[3]], frame(4), frame(3), orig[offs[5]:]), 3},
		{"record 1 duplicated", splice(orig[:offs[2]], frame(1), orig[offs[2]:]), 2},
		{"bad magic", splice([]byte("NOTALOG!"), orig[8:]), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.log")
			if err := os.WriteFile(p, c.content, 0o644); err != nil {
				t.Fatal(err)
			}
			_, _, err := OpenLog(p, LogOptions{})
			var de *DamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
				t.Fatalf("OpenLog = %v, want a DamageError", err)
			}
			if de.Sequence != c.seq {
				t.Fatalf("damage named sequence %d, want %d (%v)", de.Sequence, c.seq, err)
			}
			if after, _ := os.ReadFile(p); !bytes.Equal(after, c.content) {
				t.Fatal("a damaged log was modified on open")
			}
		})
	}
}

func TestLogRefusesForeignSteward(t *testing.T) {
	path, _ := writeLog(t, 2)
	other, _ := GenerateKey(rand.Reader)
	if _, _, err := OpenLog(path, LogOptions{Trusted: other.Public()}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("log opened under another steward: %v", err)
	}
}

func TestBuildErrorConsumesNoSequence(t *testing.T) {
	k := testKey(t)
	st, l, _ := openTestLog(t, filepath.Join(t.TempDir(), "r.log"), k)
	defer l.Close()
	bad := draft(0)
	bad.Energy = wire.Energy{}
	if _, err := st.Seal(context.Background(), bad); err == nil {
		t.Fatal("sealed a zero energy")
	}
	s, err := st.Seal(context.Background(), draft(1))
	if err != nil || s.Receipt.Sequence != 0 {
		t.Fatalf("sequence after refused seal: %v %v", err, s)
	}
}

func TestConcurrentSealersGroupCommit(t *testing.T) {
	k := testKey(t)
	path := filepath.Join(t.TempDir(), "r.log")
	st, l, _ := openTestLog(t, path, k)
	const sealers, each = 32, 10
	seqs := make(chan uint64, sealers*each)
	var wg sync.WaitGroup
	for g := 0; g < sealers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s, err := st.Seal(context.Background(), draft(g*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- s.Receipt.Sequence
			}
		}(g)
	}
	wg.Wait()
	close(seqs)
	seen := make([]bool, sealers*each)
	for s := range seqs {
		if s >= uint64(len(seen)) || seen[s] {
			t.Fatalf("sequence %d duplicated or out of range", s)
		}
		seen[s] = true
	}
	syncs := l.Syncs()
	l.Close()
	if syncs >= sealers*each {
		t.Errorf("%d fsyncs for %d appends: concurrent sealers shared none", syncs, sealers*each)
	}
	v, err := VerifyLogFile(path, k.Public(), nil)
	if err != nil || v.Records != sealers*each {
		t.Fatalf("verify: %v (%+v)", err, v)
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

package steward

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"meshd/wire"
)

// sealedCore builds and encodes draft(i) at the given chain position.
func sealedCore(t testing.TB, k *Key, d Draft, seq uint64, prev *wire.ContentID) (*Receipt, []byte, []byte) {
	t.Helper()
	r, err := New(k, nil, Options{}).Build(d, seq, prev, make([]byte, NonceSize), testClock())
	if err != nil {
		t.Fatal(err)
	}
	core, err := r.EncodeCore()
	if err != nil {
		t.Fatal(err)
	}
	env, err := Sign1(k, core)
	if err != nil {
		t.Fatal(err)
	}
	return r, core, env
}

// signWith builds an envelope around payload under any protected header
// bstr, validly signed, the way a lax encoder might.
func signWith(k *Key, protected, payload, payloadBstr []byte) []byte {
	tbs := append([]byte("\x84\x6aSignature1"), protected...)
	tbs = append(tbs, 0x40)
	tbs = append(tbs, wire.AppendBytes(nil, payload)...)
	env := append([]byte{0xd2, 0x84}, protected...)
	env = append(env, 0xa0)
	env = append(env, payloadBstr...)
	env = append(env, 0x58, 0x40)
	return append(env, ed25519.Sign(k.priv, tbs)...)
}

// recount rewrites the head of an encoded map to declare delta more pairs,
// in shortest form, for a test that has added or cut an entry.
func recount(m []byte, delta int) []byte {
	_, n, off, err := wire.ReadHead(m, 0)
	if err != nil {
		panic(err)
	}
	return append(wire.AppendHead(nil, wire.MajorMap, uint64(int(n)+delta)), m[off:]...)
}

func TestFieldTableIsInEncodedKeyOrder(t *testing.T) {
	for i := range coreFields {
		if coreFields[i].id != fieldID(i) {
			t.Errorf("%s has id %d at index %d", coreFields[i].key, coreFields[i].id, i)
		}
		if i > 0 {
			a := wire.AppendText(nil, coreFields[i-1].key)
			b := wire.AppendText(nil, coreFields[i].key)
			if wire.CompareKeys(a, b) >= 0 {
				t.Errorf("%s sorts before %s", coreFields[i].key, coreFields[i-1].key)
			}
		}
	}
}

func TestStrictEnvelopeRefusesEveryOtherEncoding(t *testing.T) {
	k := testKey(t)
	_, core, env := sealedCore(t, k, draft(1), 0, nil)
	prot := env[2 : 2+protectedLen]
	head := wire.AppendHead(nil, wire.MajorBytes, uint64(len(core)))
	canonBstr := append(bytes.Clone(head), core...)
	paddedBstr := append([]byte{0x5a, 0, 0, byte(len(core) >> 8), byte(len(core))}, core...)
	kidFirst := append(append([]byte{0x58, 0x26, 0xa2, 0x04, 0x58, 0x20}, k.pub...), 0x01, 0x27)
	extraHdr := append([]byte{0x58, 0x29, 0xa3, 0x01, 0x27, 0x03, 0x00, 0x04, 0x58, 0x20}, k.pub...)
	longProt := append([]byte{0x59, 0x00, 0x26}, prot[2:]...)
	sigAt := len(env) - ed25519.SignatureSize
	cases := []struct {
		name string
		env  []byte
		want Reason
	}{
		// Each of these but the last two carries a signature that verifies
		// over the canonical Sig_structure: only strict parsing refuses it.
		{"payload length not shortest", signWith(k, prot, core, paddedBstr), RefusedPayload},
		{"kid before alg", signWith(k, kidFirst, core, canonBstr), RefusedProtected},
		{"extra protected header", signWith(k, extraHdr, core, canonBstr), RefusedProtected},
		{"protected length not shortest", signWith(k, longProt, core, canonBstr), RefusedProtected},
		{"non-empty unprotected", append(append(bytes.Clone(env[:2+protectedLen]), 0xa1, 0x04, 0x40), env[2+protectedLen+1:]...), RefusedUnprotected},
		{"signature length not shortest", append(append(bytes.Clone(env[:sigAt-2]), 0x59, 0x00, 0x40), env[sigAt:]...), RefusedSignatureField},
		{"trailing byte", append(bytes.Clone(env), 0), RefusedTrailing},
		{"untagged", env[1:], RefusedStructure},
		{"truncated", env[:len(env)-1], RefusedStructure},
		{"flipped signature", append(bytes.Clone(env[:len(env)-1]), env[len(env)-1]^1), RefusedSignature},
		{"payload changed", signWith(k, prot, core, append(bytes.Clone(head), append(bytes.Clone(core[:len(core)-1]), core[len(core)-1]^1)...)), RefusedSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := OpenEnvelope(c.env, k.Public())
			if got := ReasonOf(err); got != c.want {
				t.Fatalf("reason %q, want %q (err %v)", got, c.want, err)
			}
			if c.want == RefusedSignature && !strings.Contains(err.Error(), ErrSignature.Error()) {
				t.Fatalf("a bad signature does not say so: %v", err)
			}
		})
	}
	if _, err := OpenEnvelope(env, k.Public()); err != nil {
		t.Fatalf("canonical envelope refused: %v", err)
	}
	other, _ := NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))
	if _, err := OpenEnvelope(env, other.Public()); ReasonOf(err) != RefusedUntrusted {
		t.Fatalf("envelope under an untrusted kid: %v", err)
	}
}

// The last record of a log, re-encoded with a padded payload length, keeps
// a valid signature but would name a new head: it must not verify.
func TestStrictReencodedLastRecordRefused(t *testing.T) {
	k := testKey(t)
	_, _, env0 := sealedCore(t, k, draft(0), 0, nil)
	id0 := wire.ContentOf(env0)
	_, core1, env1 := sealedCore(t, k, draft(1), 1, &id0)
	reenc := signWith(k, env1[2:2+protectedLen], core1, append([]byte{0x5a, 0, 0, byte(len(core1) >> 8), byte(len(core1))}, core1...))
	if !bytes.Equal(reenc[len(reenc)-64:], env1[len(env1)-64:]) {
		t.Fatal("test setup: the re-encoding should carry the very same signature")
	}
	if _, err := OpenEnvelope(reenc, k.Public()); ReasonOf(err) != RefusedPayload {
		t.Fatalf("re-encoded last record: %v", err)
	}
}

func TestStrictCoreRefusals(t *testing.T) {
	k := testKey(t)
	_, core, _ := sealedCore(t, k, draft(1), 0, nil)
	seqKey := wire.AppendText(nil, "sequence")
	at := bytes.Index(core, seqKey) + len(seqKey) // the sequence value, 00
	replaceVal := func(b []byte) []byte {
		return append(append(bytes.Clone(core[:at]), b...), core[at+1:]...)
	}
	// Swapping the first two entries ("nonce" and "route") unsorts the map.
	_, _, firstEnd, _ := wire.ReadHead(core, 0)
	k1End, _ := wire.SkipItem(core, firstEnd)
	v1End, _ := wire.SkipItem(core, k1End)
	k2End, _ := wire.SkipItem(core, v1End)
	v2End, _ := wire.SkipItem(core, k2End)
	swapped := append(append(append(bytes.Clone(core[:firstEnd]), core[v1End:v2End]...), core[firstEnd:v1End]...), core[v2End:]...)
	dup := recount(append(append(bytes.Clone(core[:firstEnd]), core[firstEnd:v1End]...), core[firstEnd:]...), 1) // the first entry twice
	addKey := func(key string, val []byte) []byte {
		// Insert where the key sorts, so only the key itself is at fault.
		kb := wire.AppendText(nil, key)
		_, n, off, _ := wire.ReadHead(core, 0)
		for i := uint64(0); i < n; i++ {
			kEnd, _ := wire.SkipItem(core, off)
			if wire.CompareKeys(kb, core[off:kEnd]) < 0 {
				break
			}
			off, _ = wire.SkipItem(core, kEnd)
		}
		out := append(bytes.Clone(core[:off]), kb...)
		return recount(append(append(out, val...), core[off:]...), 1)
	}
	cases := []struct {
		name string
		core []byte
		want Reason
	}{
		{"integer not shortest", replaceVal([]byte{0x18, 0x00}), RefusedCoreEncoding},
		{"float", replaceVal([]byte{0xf9, 0x00, 0x00}), RefusedCoreEncoding},
		{"bool", replaceVal([]byte{0xf4}), RefusedCoreEncoding},
		{"null", replaceVal([]byte{0xf6}), RefusedCoreEncoding},
		{"tag", replaceVal([]byte{0xc1, 0x00}), RefusedCoreEncoding},
		{"indefinite map", append(append([]byte{0xbf}, core[firstEnd:]...), 0xff), RefusedCoreEncoding},
		{"unsorted keys", swapped, RefusedCoreEncoding},
		{"duplicate key", dup, RefusedCoreEncoding},
		{"trailing byte", append(bytes.Clone(core), 0), RefusedCoreEncoding},
		{"not a map", []byte{0x80}, RefusedCoreEncoding},
		{"text for an integer", replaceVal([]byte{0x61, 0x30}), RefusedFieldType},
		{"negative integer", replaceVal([]byte{0x20}), RefusedFieldType},
		{"unknown non-x_ key", addKey("vendor", []byte{0x01}), RefusedUnknownField},
		{"x_ value with a float", addKey("x_vendor", []byte{0xf9, 0, 0}), RefusedCoreEncoding},
		{"x_ value with a tag", addKey("x_vendor", []byte{0xc1, 0x00}), RefusedCoreEncoding},
		{"x_ nested map unsorted", addKey("x_vendor", []byte{0xa2, 0x62, 'b', 'b', 0x00, 0x61, 'a', 0x00}), RefusedCoreEncoding},
		{"x_ text not UTF-8", addKey("x_vendor", []byte{0x61, 0xff}), RefusedCoreEncoding},
		{"tokens_in beyond u32", func() []byte {
			kb := wire.AppendText(nil, "tokens_in")
			i := bytes.Index(core, kb) + len(kb)
			return append(append(bytes.Clone(core[:i]), 0x1b, 1, 0, 0, 0, 0, 0, 0, 0), core[i+1:]...)
		}(), RefusedFieldValue},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeCore(c.core)
			if err == nil {
				if r, _ := DecodeCore(c.core); r != nil {
					err = r.CheckConforming()
				}
			}
			if got := ReasonOf(err); got != c.want {
				t.Fatalf("reason %q, want %q (err %v)", got, c.want, err)
			}
		})
	}
	// Every required field, removed, is named missing.
	for _, f := range coreFields {
		if !f.required {
			continue
		}
		kb := wire.AppendText(nil, f.key)
		i := bytes.Index(core, kb)
		end, _ := wire.SkipItem(core, i+len(kb))
		cut := recount(append(bytes.Clone(core[:i]), core[end:]...), -1)
		if _, err := DecodeCore(cut); ReasonOf(err) != RefusedMissingField || !strings.Contains(err.Error(), f.key) {
			t.Errorf("without %s: %v", f.key, err)
		}
	}
}

// Each rule is checked on signed envelopes, as a verifier meets them.
func TestStrictFieldRulesAtVerify(t *testing.T) {
	k := testKey(t)
	prev := wire.ContentOf([]byte("previous envelope"))
	grant := wire.ContentOf([]byte("grant"))
	hold, debit := uint64(3), uint64(100)
	granted := draft(2)
	granted.Grant, granted.GrantHold, granted.GrantDebit = &grant, &hold, &debit
	hw := draft(3)
	hw.Energy = wire.Measured(5000, 4500)
	hw.Metering = hwMetering()
	cases := []struct {
		name string
		d    Draft
		seq  uint64
		prev *wire.ContentID
		mut  func(*Receipt)
		want Reason
	}{
		{"upper-case request_id", draft(1), 0, nil, func(r *Receipt) { r.RequestID = strings.ToUpper(r.RequestID) }, RefusedFieldValue},
		{"upper-case grant_id", granted, 0, nil, func(r *Receipt) { g := strings.ToUpper(*r.GrantID); r.GrantID = &g }, RefusedFieldValue},
		{"upper-case prev", draft(1), 1, &prev, func(r *Receipt) { p := strings.ToUpper(*r.Prev); r.Prev = &p }, RefusedFieldValue},
		{"measured_uj on Estimator", draft(1), 0, nil, func(r *Receipt) { r.MeasuredUJ = u64p(4500) }, RefusedCoupling},
		{"x_error_uj on Estimator", draft(1), 0, nil, func(r *Receipt) { r.ErrorUJ = u64p(1) }, RefusedCoupling},
		{"x_samples on Estimator", draft(1), 0, nil, func(r *Receipt) { r.Samples = u64p(1) }, RefusedCoupling},
		{"HwShunt without x_max_gap_ns", hw, 0, nil, func(r *Receipt) { r.MaxGapNs = nil }, RefusedCoupling},
		{"x_meter without x_window_ns", draft(1), 0, nil, func(r *Receipt) { r.WindowNs = nil }, RefusedMissingField},
		{"empty x_meter", draft(1), 0, nil, func(r *Receipt) { r.Meter = new(string) }, RefusedFieldValue},
		{"x_grant_hold without debit", granted, 0, nil, func(r *Receipt) { r.GrantDebitUJ = nil }, RefusedMissingField},
		{"x_grant_* without grant_id", granted, 0, nil, func(r *Receipt) { r.GrantID = nil }, RefusedMissingField},
		{"debit above charged", granted, 0, nil, func(r *Receipt) { r.GrantDebitUJ = u64p(1 << 40) }, RefusedFieldValue},
		{"steward is not the kid", draft(1), 0, nil, func(r *Receipt) { r.Steward = strings.Repeat("ab", 32) }, RefusedStewardKid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _, _ := sealedCore(t, k, c.d, c.seq, c.prev)
			c.mut(r)
			core, err := r.EncodeCore()
			if err != nil {
				t.Fatal(err)
			}
			env, _ := Sign1(k, core)
			_, err = OpenEnvelope(env, k.Public())
			if got := ReasonOf(err); got != c.want {
				t.Fatalf("reason %q, want %q (err %v)", got, c.want, err)
			}
		})
	}
}

func TestStrictCheckLink(t *testing.T) {
	k := testKey(t)
	open := func(env []byte) *Opened {
		o, err := OpenEnvelope(env, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	_, _, env0 := sealedCore(t, k, draft(0), 0, nil)
	id0 := wire.ContentOf(env0)
	other := wire.ContentOf([]byte("elsewhere"))
	_, _, env1 := sealedCore(t, k, draft(1), 1, &id0)
	_, _, bad := sealedCore(t, k, draft(1), 1, &other)
	_, _, skip := sealedCore(t, k, draft(1), 2, &id0)
	k2, _ := NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	_, _, foreignKey := sealedCore(t, k2, draft(1), 1, &id0)
	if err := CheckLink(open(env0), open(env1)); err != nil {
		t.Fatalf("good link refused: %v", err)
	}
	for name, env := range map[string][]byte{"wrong prev": bad, "skipped sequence": skip, "other steward": foreignKey} {
		if err := CheckLink(open(env0), open(env)); ReasonOf(err) != RefusedChainLink {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Sign1 must produce what the go-cose based sealer produced before it, so
// that every published envelope and grant id stays valid.
func TestSign1IsTheCanonicalEnvelope(t *testing.T) {
	k := testKey(t)
	for _, n := range []int{0, 1, 23, 24, 255, 256, 70000} {
		payload := bytes.Repeat([]byte{0xa0}, n)
		env, err := Sign1(k, payload)
		if err != nil {
			t.Fatal(err)
		}
		p, pub, err := OpenTrusted(env, nil)
		if err != nil || !bytes.Equal(p, payload) || !bytes.Equal(pub, k.Public()) {
			t.Fatalf("payload of %d bytes does not round-trip: %v", n, err)
		}
		want := append([]byte{0xd2, 0x84}, k.rawProt...)
		if !bytes.HasPrefix(env, want) {
			t.Fatalf("protected header differs from the key's go-cose encoding")
		}
	}
}

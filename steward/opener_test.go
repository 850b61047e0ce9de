package steward

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"meshd/wire"
)

// TestOpenerMatchesOpenEnvelope opens every envelope of the conformance
// vectors, accepted and refused, and variants of each with one byte
// changed (so that every check refuses something), with OpenEnvelope and
// with one Opener reused across them all and across keys: the error text
// and reason, or the receipt, must be the same. What an Opener returned,
// cloned, must still equal OpenEnvelope's after later opens overwrote the
// Opener's storage.
func TestOpenerMatchesOpenEnvelope(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "conformance", "v1", "receipts", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no conformance vectors (%v)", err)
	}
	type kept struct {
		clone *Opened
		want  *Opened
		name  string
	}
	var (
		op              Opener
		keep            []kept
		opened, refused int
	)
	other := testKey(t).Public()
	check := func(name string, env []byte, trusted ed25519.PublicKey) {
		t.Helper()
		want, werr := OpenEnvelope(env, trusted)
		got, gerr := op.Open(env, trusted)
		switch {
		case (werr == nil) != (gerr == nil):
			t.Fatalf("%s: OpenEnvelope says %v, the Opener %v", name, werr, gerr)
		case werr != nil:
			if werr.Error() != gerr.Error() || ReasonOf(werr) != ReasonOf(gerr) {
				t.Fatalf("%s: OpenEnvelope refuses %q (%s), the Opener %q (%s)", name, werr, ReasonOf(werr), gerr, ReasonOf(gerr))
			}
			refused++
			return
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: the Opener's receipt differs:\n%+v\n%+v", name, *want.Receipt, *got.Receipt)
		}
		again, err := got.Receipt.EncodeCore()
		if err != nil || !bytes.Equal(again, got.Core) {
			t.Fatalf("%s: the Opener's receipt does not re-encode to its core (%v)", name, err)
		}
		c, err := got.Clone()
		if err != nil {
			t.Fatalf("%s: clone: %v", name, err)
		}
		keep = append(keep, kept{c, want, name})
		opened++
	}
	for _, dir := range dirs {
		mb, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			TrustedKey string `json:"trusted_key"`
		}
		if err := json.Unmarshal(mb, &meta); err != nil {
			t.Fatal(err)
		}
		trusted, err := wire.ParseHex(meta.TrustedKey, ed25519.PublicKeySize)
		if err != nil {
			t.Fatalf("%s: trusted_key: %v", dir, err)
		}
		eb, err := os.ReadFile(filepath.Join(dir, "envelope.hex"))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Fields(string(eb)) {
			env, err := wire.ParseHex(line, len(line)/2)
			if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			name := filepath.Base(dir) + "/" + string(rune('0'+i%10))
			check(name, env, trusted)
			check(name+" untrusted", env, nil)
			check(name+" another key", env, other)
			for _, at := range []int{0, 1, 5, 12, 45, 46, 47, 60, len(env) / 2, len(env) - 70, len(env) - 1} {
				if at < 0 || at >= len(env) {
					continue
				}
				bad := bytes.Clone(env)
				bad[at] ^= 0x01
				check(name+" changed", bad, trusted)
			}
			check(name+" cut", env[:len(env)-1], trusted)
		}
	}
	// A foreign implementation's receipt, with extensions meshd does not
	// know: their values are views of the Opener's storage too.
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, 32))
	pub := priv.Public().(ed25519.PublicKey)
	m := foreignFields(pub)
	m["x_vendor"] = fText("theirs")
	m["x_z"] = fUint(7)
	check("foreign", fSign1(priv, fMap(m)), pub)
	check("foreign untrusted", fSign1(priv, fMap(m)), nil)
	// Signed by one key, naming another, after the Opener has spelt both.
	check("steward names another key", fSign1(priv, fMap(foreignFields(other))), pub)
	check("steward names another key, untrusted", fSign1(priv, fMap(foreignFields(other))), nil)
	if opened == 0 || refused == 0 {
		t.Fatalf("%d opened, %d refused: the vectors did not exercise both", opened, refused)
	}
	for _, k := range keep {
		if !reflect.DeepEqual(k.want.Receipt, k.clone.Receipt) || !bytes.Equal(k.want.Key, k.clone.Key) || k.want.ID != k.clone.ID {
			t.Fatalf("%s: the clone changed after later opens", k.name)
		}
	}
}

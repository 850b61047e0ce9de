package rag

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"sync"
	"testing"
)

// The contract's corpus-hash vector.
const (
	contractDescriptionJSON = `{
  "model": "macula/multilingual-e5-small:f16",
  "dim": 384,
  "repos": [
    {
      "id": "alpha",
      "url": "https://example.org/alpha.git",
      "branch": "main",
      "commit": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    },
    {
      "id": "beta",
      "url": "/srv/mirrors/beta.git",
      "branch": "trunk",
      "commit": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
    }
  ]
}`
	contractCorpusHash = "0d5f037bfa41e1bce262d87098576102063fa084f63441a348d2a7648b4b2644"
)

// contractDescription is the contract's description, unsigned.
func contractDescription() Description {
	return Description{
		Model: "macula/multilingual-e5-small:f16",
		Dim:   384,
		Repos: []Repo{
			{ID: "alpha", URL: "https://example.org/alpha.git", Branch: "main", Commit: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
			{ID: "beta", URL: "/srv/mirrors/beta.git", Branch: "trunk", Commit: "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"},
		},
		CorpusHash: contractCorpusHash,
	}
}

// lampsVector is the IETF LAMPS draft's id-MLDSA87-RSA4096-PSS-SHA512 test
// vector: a third party's composite key and signature.
type lampsVector struct {
	M, PK, SK, S []byte
}

func loadLAMPS(t testing.TB) lampsVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/lamps_mldsa87_rsa4096_pss_sha512.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ M, PK, SK, S string }
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	var v lampsVector
	for _, p := range []struct {
		dst *[]byte
		src string
	}{{&v.M, f.M}, {&v.PK, f.PK}, {&v.SK, f.SK}, {&v.S, f.S}} {
		if *p.dst, err = base64.StdEncoding.DecodeString(p.src); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// pureTestSeed is the fixed pq_pure test key's seed: the bytes 0x00..0x1f.
func pureTestSeed() []byte {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i)
	}
	return seed
}

var (
	testKeysOnce sync.Once
	testKeys     map[string]*PrivateKey
	testKeysErr  error
)

// testKey is the fixed test key of a profile: pq_pure from pureTestSeed,
// pq_hybrid the LAMPS vector's key (an RSA-4096 key is too slow to make per
// test, and this one is public anyway).
func testKey(t testing.TB, profile string) *PrivateKey {
	t.Helper()
	testKeysOnce.Do(func() {
		testKeys = map[string]*PrivateKey{}
		var k *PrivateKey
		if k, testKeysErr = NewKeyFromSeed(ProfilePQPure, pureTestSeed()); testKeysErr != nil {
			return
		}
		testKeys[ProfilePQPure] = k
		if k, testKeysErr = NewKeyFromSeed(ProfilePQHybrid, loadLAMPS(t).SK); testKeysErr != nil {
			return
		}
		testKeys[ProfilePQHybrid] = k
	})
	if testKeysErr != nil {
		t.Fatal(testKeysErr)
	}
	return testKeys[profile]
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var profiles = []string{ProfilePQPure, ProfilePQHybrid}

func otherProfile(p string) string {
	if p == ProfilePQPure {
		return ProfilePQHybrid
	}
	return ProfilePQPure
}

package rag

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha512"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/cloudflare/circl/sign/mldsa/mldsa87"
)

// The crypto profiles a caller verifies under. A realm runs one; the caller
// names it, and nothing in an object selects it.
const (
	// ProfilePQPure signs with ML-DSA-87 alone (CNSA 2.0).
	ProfilePQPure = "pq_pure"
	// ProfilePQHybrid signs with the IETF LAMPS composite
	// id-MLDSA87-RSA4096-PSS-SHA512: ML-DSA-87 and RSA-PSS-4096 with SHA-384,
	// valid only if both halves verify.
	ProfilePQHybrid = "pq_hybrid"
)

// Label is the label a corpus signature is made under.
const Label = "macula-rag corpus v1"

// The refusals of Open, named as macula_signed_object names them.
var (
	// ErrObjectMalformed ("malformed") is an object that is not a map of
	// exactly key, tbs and signature, each a byte string, under the decoding
	// rule; a key not in the profile's carried form; or a tbs the decoding
	// rule refuses, or that is not a map whose alg is text.
	ErrObjectMalformed = errors.New("rag: signed object: malformed")
	// ErrSignatureInvalid ("signature_invalid") is an object whose signature
	// does not verify over the label, its key's hash and its tbs as received.
	ErrSignatureInvalid = errors.New("rag: signed object: signature_invalid")
	// ErrAlgMismatch ("alg_mismatch") is a verified object whose alg names
	// another algorithm than the caller's profile.
	ErrAlgMismatch = errors.New("rag: signed object: alg_mismatch")
	// ErrUnknownProfile is a profile other than pq_pure and pq_hybrid. It is
	// a caller's mistake, not a refusal of the object.
	ErrUnknownProfile = errors.New("rag: unknown crypto profile")
)

// ObjectRefusalReason is macula's name for a refusal from Open: "malformed",
// "signature_invalid" or "alg_mismatch", or "" for any other error.
func ObjectRefusalReason(err error) string {
	switch {
	case errors.Is(err, ErrObjectMalformed):
		return "malformed"
	case errors.Is(err, ErrSignatureInvalid):
		return "signature_invalid"
	case errors.Is(err, ErrAlgMismatch):
		return "alg_mismatch"
	}
	return ""
}

// Sizes of the carried forms, as macula checks them.
const (
	mldsaPublicKeySize = mldsa87.PublicKeySize // 2,592
	mldsaSignatureSize = mldsa87.SignatureSize // 4,627
	mldsaSeedSize      = mldsa87.SeedSize      // 32
	rsaModulusBits     = 4096
	rsaPublicExponent  = 65537
)

// The LAMPS composite id-MLDSA87-RSA4096-PSS-SHA512 as macula 12 and later
// sign it (draft-ietf-lamps-pq-composite-sigs): both halves sign
// M' = prefix ‖ label ‖ len(ctx) ‖ ctx ‖ SHA-512(M) with an empty ctx, the
// ML-DSA-87 half with the label as its FIPS 204 context string.
const (
	compositePrefix = "CompositeAlgorithmSignatures2025"
	compositeLabel  = "COMPSIG-MLDSA87-RSA4096-PSS-SHA512"
)

// pssOptions are the composite's RSA-PSS parameters: SHA-384, MGF1 with
// SHA-384 (Go uses the signing hash for MGF1), and exactly 48 bytes of salt.
var pssOptions = &rsa.PSSOptions{SaltLength: 48, Hash: crypto.SHA384}

type profileDef struct {
	alg    string
	hybrid bool
}

func profileOf(profile string) (profileDef, error) {
	switch profile {
	case ProfilePQPure:
		return profileDef{alg: "ML-DSA-87"}, nil
	case ProfilePQHybrid:
		return profileDef{alg: "ML-DSA-87-PS384", hybrid: true}, nil
	}
	return profileDef{}, fmt.Errorf("%w: %q", ErrUnknownProfile, profile)
}

// Alg is the alg a profile's signed objects name in their tbs: "ML-DSA-87"
// for pq_pure, "ML-DSA-87-PS384" for pq_hybrid, "" for an unknown profile.
func Alg(profile string) string {
	def, _ := profileOf(profile)
	return def.alg
}

// PrivateKey is an operator's identity key in one profile: the ML-DSA-87
// half, and in pq_hybrid the RSA-PSS-4096 half. It signs as a whole, never
// with one half alone.
type PrivateKey struct {
	profile string
	seed    []byte // the key's seed form, as NewKeyFromSeed takes it
	mldsa   *mldsa87.PrivateKey
	rsa     *rsa.PrivateKey // pq_hybrid only
	carried []byte
}

// NewKeyFromSeed makes the key a seed determines. For pq_pure the seed is the
// 32-byte ML-DSA-87 seed (FIPS 204 ξ), as macula stores it. For pq_hybrid it
// is that seed followed by the DER (PKCS #1) RSAPrivateKey of a 4,096-bit key
// with exponent 65537: the LAMPS composite private key layout, and the two
// components macula stores. RSA has no standard seed form, so the RSA half is
// carried whole.
func NewKeyFromSeed(profile string, seed []byte) (*PrivateKey, error) {
	def, err := profileOf(profile)
	if err != nil {
		return nil, err
	}
	if len(seed) < mldsaSeedSize || (!def.hybrid && len(seed) != mldsaSeedSize) {
		return nil, fmt.Errorf("rag: %s key seed: %d bytes, want %s", profile, len(seed), seedShape(def))
	}
	var xi [mldsaSeedSize]byte
	copy(xi[:], seed)
	pk, sk := mldsa87.NewKeyFromSeed(&xi)
	k := &PrivateKey{profile: profile, seed: bytes.Clone(seed), mldsa: sk, carried: pk.Bytes()}
	if !def.hybrid {
		return k, nil
	}
	k.rsa, err = x509.ParsePKCS1PrivateKey(seed[mldsaSeedSize:])
	if err != nil {
		return nil, fmt.Errorf("rag: pq_hybrid key seed: the RSA half: %w", err)
	}
	if k.rsa.N.BitLen() != rsaModulusBits || k.rsa.E != rsaPublicExponent {
		return nil, fmt.Errorf("rag: pq_hybrid key seed: RSA key of %d bits with exponent %d, want %d bits with %d",
			k.rsa.N.BitLen(), k.rsa.E, rsaModulusBits, rsaPublicExponent)
	}
	k.carried = append(k.carried, x509.MarshalPKCS1PublicKey(&k.rsa.PublicKey)...)
	return k, nil
}

func seedShape(def profileDef) string {
	if def.hybrid {
		return "the 32-byte ML-DSA-87 seed followed by a DER RSAPrivateKey"
	}
	return "the 32-byte ML-DSA-87 seed"
}

// GenerateKey makes a new key in a profile from crypto/rand. A pq_hybrid key
// generates an RSA-4096 half, which takes seconds.
func GenerateKey(profile string) (*PrivateKey, error) {
	def, err := profileOf(profile)
	if err != nil {
		return nil, err
	}
	seed := make([]byte, mldsaSeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fmt.Errorf("rag: generate a %s key: %w", profile, err)
	}
	if def.hybrid {
		rk, err := rsa.GenerateKey(rand.Reader, rsaModulusBits)
		if err != nil {
			return nil, fmt.Errorf("rag: generate a pq_hybrid key: RSA half: %w", err)
		}
		seed = append(seed, x509.MarshalPKCS1PrivateKey(rk)...)
	}
	return NewKeyFromSeed(profile, seed)
}

// Profile is the profile the key belongs to.
func (k *PrivateKey) Profile() string { return k.profile }

// PublicKey is the key as carried in signed objects: the 2,592-byte ML-DSA-87
// key, followed in pq_hybrid by the DER RSAPublicKey.
func (k *PrivateKey) PublicKey() []byte { return bytes.Clone(k.carried) }

// NodeID is the hex node id of the key.
func (k *PrivateKey) NodeID() string { return NodeID(k.profile, k.carried) }

// Seed is the key's seed form, as NewKeyFromSeed takes it. It is secret.
func (k *PrivateKey) Seed() []byte { return bytes.Clone(k.seed) }

// String names the key by its profile and node id, never its private half.
func (k *PrivateKey) String() string { return k.profile + " key " + k.NodeID() }

// Sign signs a corpus hash as a provider does: a macula signed object over
// the single text field corpus_hash, under Label, carrying the key, encoded
// as CBOR bytes for describe_corpus's signature. The tbs is the core
// deterministic CBOR map {"alg": Alg(profile), "corpus_hash": corpusHash}.
//
// ML-DSA-87 signs deterministically (FIPS 204's deterministic variant), so a
// pq_pure object is reproducible; the RSA-PSS half of pq_hybrid takes fresh
// salt from crypto/rand.
func Sign(profile string, key *PrivateKey, corpusHash string) ([]byte, error) {
	if _, err := profileOf(profile); err != nil {
		return nil, err
	}
	if key == nil || key.profile != profile {
		return nil, fmt.Errorf("rag: sign corpus: the key is not a %s key", profile)
	}
	if !isLowerHex(corpusHash, 64) {
		return nil, fmt.Errorf("rag: sign corpus: %q is not a corpus hash (64 lowercase hex digits)", corpusHash)
	}
	tbs, err := coreEncMode.Marshal(map[string]string{"alg": Alg(profile), "corpus_hash": corpusHash})
	if err != nil {
		return nil, fmt.Errorf("rag: sign corpus: encode tbs: %w", err)
	}
	return signObject(key, tbs)
}

// signObject signs tbs as given under Label and encodes the object. Sign
// builds the tbs; tests use this directly to make objects Sign would not.
func signObject(key *PrivateKey, tbs []byte) ([]byte, error) {
	signature, err := key.sign(signedBytes(Label, key.carried, tbs))
	if err != nil {
		return nil, err
	}
	return encodeObject(key.carried, tbs, signature)
}

// encodeObject is the wire form: the core deterministic CBOR map with text
// keys, whose order that encoding fixes as key, tbs, signature.
func encodeObject(key, tbs, signature []byte) ([]byte, error) {
	object, err := coreEncMode.Marshal(map[string][]byte{"key": key, "tbs": tbs, "signature": signature})
	if err != nil {
		return nil, fmt.Errorf("rag: encode signed object: %w", err)
	}
	return object, nil
}

// signedBytes is what a signed object's signature covers: the label, a zero
// byte, the SHA-384 of the key as carried, and tbs. Hashing the key binds the
// signature to it even when a held object leaves the key out.
func signedBytes(label string, key, tbs []byte) []byte {
	keyHash := sha512.Sum384(key)
	out := make([]byte, 0, len(label)+1+len(keyHash)+len(tbs))
	out = append(out, label...)
	out = append(out, 0)
	out = append(out, keyHash[:]...)
	return append(out, tbs...)
}

// compositeRepresentative is M', the message both halves of the composite
// sign.
func compositeRepresentative(message []byte) []byte {
	digest := sha512.Sum512(message)
	out := make([]byte, 0, len(compositePrefix)+len(compositeLabel)+1+len(digest))
	out = append(out, compositePrefix...)
	out = append(out, compositeLabel...)
	out = append(out, 0) // len(ctx): the application context is empty
	return append(out, digest[:]...)
}

func (k *PrivateKey) sign(message []byte) ([]byte, error) {
	if k.rsa == nil {
		sig := make([]byte, mldsaSignatureSize)
		if err := mldsa87.SignTo(k.mldsa, message, nil, false, sig); err != nil {
			return nil, fmt.Errorf("rag: ML-DSA-87 sign: %w", err)
		}
		return sig, nil
	}
	rep := compositeRepresentative(message)
	sig := make([]byte, mldsaSignatureSize, mldsaSignatureSize+rsaModulusBits/8)
	if err := mldsa87.SignTo(k.mldsa, rep, []byte(compositeLabel), false, sig); err != nil {
		return nil, fmt.Errorf("rag: composite sign: ML-DSA-87 half: %w", err)
	}
	digest := sha512.Sum384(rep)
	rsaSig, err := rsa.SignPSS(rand.Reader, k.rsa, crypto.SHA384, digest[:], pssOptions)
	if err != nil {
		return nil, fmt.Errorf("rag: composite sign: RSA-PSS half: %w", err)
	}
	return append(sig, rsaSig...), nil
}

// Open verifies a corpus signature under Label and the caller's profile, as
// macula_signed_object:verify/3 reads an object, in its order: the object is
// a map of exactly key, tbs and signature, each a byte string (else
// malformed); the key is in the profile's one carried form (else malformed);
// the signature verifies over tbs as received (else signature_invalid); only
// then is tbs decoded, and it must be a map whose alg is text (else
// malformed) naming the profile's algorithm (else alg_mismatch). alg is
// checked, never used to choose an algorithm, and nothing is re-encoded.
//
// It returns the signed corpus_hash and the key the signature verified with.
// corpusHash is "" when the verified tbs holds no text corpus_hash: the
// object is sound but vouches for no corpus, which VerifyCorpus reports as
// signature_hash_mismatch. Refusals wrap ErrObjectMalformed,
// ErrSignatureInvalid or ErrAlgMismatch; an unknown profile is
// ErrUnknownProfile.
func Open(profile string, object []byte) (corpusHash string, key []byte, err error) {
	def, err := profileOf(profile)
	if err != nil {
		return "", nil, err
	}
	key, tbs, signature, err := decodeObject(object)
	if err != nil {
		return "", nil, err
	}
	if !carriedKeyWellFormed(key, def) {
		return "", nil, fmt.Errorf("%w: the key is not in the %s carried form", ErrObjectMalformed, profile)
	}
	if !verify(signedBytes(Label, key, tbs), signature, key, def) {
		return "", nil, fmt.Errorf("%w: under %s", ErrSignatureInvalid, profile)
	}
	fields, err := decodeStrict(tbs)
	if err != nil {
		return "", nil, fmt.Errorf("%w: tbs: %w", ErrObjectMalformed, err)
	}
	m, isMap := fields.(map[any]any)
	alg, isText := m["alg"].(string)
	if !isMap || !isText {
		return "", nil, fmt.Errorf("%w: tbs is not a map with a text alg", ErrObjectMalformed)
	}
	if alg != def.alg {
		return "", nil, fmt.Errorf("%w: tbs names %q, the %s profile signs %q", ErrAlgMismatch, alg, profile, def.alg)
	}
	corpusHash, _ = m["corpus_hash"].(string)
	return corpusHash, key, nil
}

// decodeObject reads the wire form under the decoding rule: exactly the keys
// key, tbs and signature, each a byte string. The held form (no key) is
// malformed here, since a corpus signature must carry its key.
func decodeObject(object []byte) (key, tbs, signature []byte, err error) {
	v, err := decodeStrict(object)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: %w", ErrObjectMalformed, err)
	}
	m, ok := v.(map[any]any)
	if !ok || len(m) != 3 {
		return nil, nil, nil, fmt.Errorf("%w: not a map of exactly key, tbs and signature", ErrObjectMalformed)
	}
	var fields [3][]byte
	for i, name := range []string{"key", "tbs", "signature"} {
		if fields[i], ok = m[name].([]byte); !ok {
			return nil, nil, nil, fmt.Errorf("%w: %s is missing or not a byte string", ErrObjectMalformed, name)
		}
	}
	return fields[0], fields[1], fields[2], nil
}

// carriedKeyWellFormed reports whether key is in the profile's one carried
// form: exactly the 2,592-byte ML-DSA-87 key in pq_pure; in pq_hybrid that key
// followed by a DER RSAPublicKey that encodes back to the same bytes, with a
// 4,096-bit modulus and exponent 65537. A BER form of the same key is refused
// because its node id would differ.
func carriedKeyWellFormed(key []byte, def profileDef) bool {
	if !def.hybrid {
		return len(key) == mldsaPublicKeySize
	}
	if len(key) <= mldsaPublicKeySize {
		return false
	}
	der := key[mldsaPublicKeySize:]
	pub, err := x509.ParsePKCS1PublicKey(der)
	if err != nil {
		return false
	}
	return pub.N.BitLen() == rsaModulusBits && pub.E == rsaPublicExponent &&
		bytes.Equal(x509.MarshalPKCS1PublicKey(pub), der)
}

// verify reports whether signature is valid over message for a well-formed
// carried key. A composite's RSA half must be exactly as long as the modulus:
// RSA would accept the value with its leading zero bytes dropped, and macula
// refuses that, so the length is checked first.
func verify(message, signature, key []byte, def profileDef) bool {
	var pk mldsa87.PublicKey
	if err := pk.UnmarshalBinary(key[:mldsaPublicKeySize]); err != nil {
		return false
	}
	if !def.hybrid {
		return len(signature) == mldsaSignatureSize && mldsa87.Verify(&pk, message, nil, signature)
	}
	if len(signature) != mldsaSignatureSize+rsaModulusBits/8 {
		return false
	}
	rsaPub, err := x509.ParsePKCS1PublicKey(key[mldsaPublicKeySize:])
	if err != nil {
		return false
	}
	rep := compositeRepresentative(message)
	digest := sha512.Sum384(rep)
	mldsaValid := mldsa87.Verify(&pk, rep, []byte(compositeLabel), signature[:mldsaSignatureSize])
	rsaValid := rsa.VerifyPSS(rsaPub, crypto.SHA384, digest[:], signature[mldsaSignatureSize:], pssOptions) == nil
	return mldsaValid && rsaValid
}

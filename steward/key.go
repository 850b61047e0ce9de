package steward

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/veraison/go-cose"
)

// Key is a steward signing identity: an Ed25519 key pair. The public key is
// the steward id (hex) and the COSE kid (raw 32 bytes).
type Key struct {
	priv ed25519.PrivateKey
	pub  ed25519.PublicKey
	// The protected header and signer never change for a key, so they are
	// built once instead of on every seal.
	protected cose.ProtectedHeader
	rawProt   []byte
	rawUnprot []byte // the empty map, a0
	signer    cose.Signer
}

func newKey(priv ed25519.PrivateKey) (*Key, error) {
	k := &Key{priv: priv, pub: priv.Public().(ed25519.PublicKey)}
	k.protected = cose.ProtectedHeader{
		cose.HeaderLabelAlgorithm: cose.AlgorithmEdDSA,
		cose.HeaderLabelKeyID:     []byte(k.pub),
	}
	raw, err := k.protected.MarshalCBOR()
	if err != nil {
		return nil, fmt.Errorf("steward key: protected header: %w", err)
	}
	k.rawProt, k.rawUnprot = raw, []byte{0xa0}
	if k.signer, err = cose.NewSigner(cose.AlgorithmEdDSA, priv); err != nil {
		return nil, fmt.Errorf("steward key: %w", err)
	}
	return k, nil
}

// NewKeyFromSeed derives a key from a 32-byte Ed25519 seed (RFC 8032).
func NewKeyFromSeed(seed []byte) (*Key, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("steward key seed: want %d bytes, got %d", ed25519.SeedSize, len(seed))
	}
	return newKey(ed25519.NewKeyFromSeed(seed))
}

// GenerateKey makes a new key from rand.
func GenerateKey(rand io.Reader) (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, fmt.Errorf("generate steward key: %w", err)
	}
	return newKey(priv)
}

// Public returns the public key.
func (k *Key) Public() ed25519.PublicKey { return k.pub }

// ID is the steward identity as it appears in receipts: lower-case hex of
// the public key.
func (k *Key) ID() string { return hex.EncodeToString(k.pub) }

// Sign signs msg with the steward key.
func (k *Key) Sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// Seed returns the 32-byte seed, for conformance metadata only.
func (k *Key) Seed() []byte { return k.priv.Seed() }

const pemType = "PRIVATE KEY"

// WriteKeyFile writes k to path as a PKCS#8 PEM file with mode 0600. It
// refuses to overwrite an existing file: losing a steward key orphans every
// log it signed.
func WriteKeyFile(path string, k *Key) error {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write key %s: refusing to overwrite an existing key file", path)
		}
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := pem.Encode(f, &pem.Block{Type: pemType, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return f.Close()
}

// LoadKeyFile reads a key written by WriteKeyFile. A file readable or
// writable by group or others is refused: such a key can no longer vouch
// for the receipts it signs.
func LoadKeyFile(path string) (*Key, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load key %s: permissions %#o are too open (want 0600 or stricter)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != pemType {
		return nil, fmt.Errorf("load key %s: not a PEM %q block", path, pemType)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("load key %s: not an Ed25519 key (%T)", path, k)
	}
	return newKey(priv)
}

// ParsePublicKey parses a steward id (64 hex characters).
func ParsePublicKey(id string) (ed25519.PublicKey, error) {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("steward public key %q: want 64 hex characters", id)
	}
	return ed25519.PublicKey(b), nil
}

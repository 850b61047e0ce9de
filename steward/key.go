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
	"path/filepath"
	"syscall"

	"github.com/veraison/go-cose"

	"meshd/wire"
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

const pemType = "PRIVATE KEY"

// maxKeyFile bounds what LoadKeyFile reads: an Ed25519 PKCS#8 PEM is about
// 120 bytes, so anything near this size is not a key file.
const maxKeyFile = 1 << 10

// WriteKeyFile writes k to path as a PKCS#8 PEM file with mode 0600. It
// refuses to overwrite an existing file: losing a steward key orphans every
// log it signed.
//
// The key is written and synced under a temporary name in the same
// directory and only then linked to path, which fails if path exists. A
// write that fails part way therefore leaves no file at path (an empty or
// partial key file would block every retry) and a crash leaves either no
// key or a whole one.
func WriteKeyFile(path string, k *Key) error {
	return writeKeyFile(path, k, func(w io.Writer, b *pem.Block) error { return pem.Encode(w, b) })
}

// writeKeyFile is WriteKeyFile with the encoding step passed in, so a test
// can make the write fail after the temporary file exists.
func writeKeyFile(path string, k *Key, encode func(io.Writer, *pem.Block) error) (err error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if _, err := os.Lstat(path); err == nil {
		// Checked first only to say so before doing any work; the link
		// below is what guarantees it.
		return fmt.Errorf("write key %s: refusing to overwrite an existing key file", path)
	}
	dir := filepath.Dir(path)
	// CreateTemp opens with O_EXCL and mode 0600.
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	tmp := f.Name()
	// The temporary name is never the key: it goes whatever happens.
	defer func() {
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("write key %s: remove temporary %s: %w", path, tmp, rmErr)
		}
	}()
	if err := encode(f, &pem.Block{Type: pemType, Bytes: der}); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	// Unlike rename, link never replaces an existing path.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("write key %s: refusing to overwrite an existing key file", path)
		}
		return fmt.Errorf("write key %s: %w", path, err)
	}
	if err := syncParent(dir); err != nil {
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return nil
}

// syncParent makes the key's new directory entry durable: without it a
// crash could lose the name of a key that receipts were already signed with.
func syncParent(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return d.Close()
}

// LoadKeyFile reads a key written by WriteKeyFile. A file readable or
// writable by group or others is refused: such a key can no longer vouch
// for the receipts it signs. So is anything that is not a regular file of
// at most 1 KiB, so that a path naming a FIFO or a device can neither hang
// the caller nor make it read without end.
func LoadKeyFile(path string) (*Key, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
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

// readKeyFile returns the bytes of a key file after checking what it is.
// O_NONBLOCK makes opening a FIFO return at once instead of waiting for a
// writer, and the checks are made on the opened file, not the path, so the
// file cannot be swapped between check and read.
func readKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	switch {
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("load key %s: not a regular file (%s)", path, st.Mode().Type())
	case st.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("load key %s: permissions %#o are too open (want 0600 or stricter)", path, st.Mode().Perm())
	case st.Size() > maxKeyFile:
		return nil, fmt.Errorf("load key %s: %d bytes is too large for a key file (at most %d)", path, st.Size(), maxKeyFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("load key %s: %w", path, err)
	}
	if len(b) > maxKeyFile { // it grew after the stat
		return nil, fmt.Errorf("load key %s: more than %d bytes, too large for a key file", path, maxKeyFile)
	}
	return b, nil
}

// ParsePublicKey parses a steward id (64 hex characters).
func ParsePublicKey(id string) (ed25519.PublicKey, error) {
	b, err := wire.ParseHex(id, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("steward public key %q: %w", id, err)
	}
	return ed25519.PublicKey(b), nil
}

package corpus

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"meshd/steward"
	"meshd/wire"
)

// PinPurpose is the value of mesh_rag_pin: a pin statement, which no
// receipt, checkpoint, grant, attestation or reply statement opener takes.
const PinPurpose = "meshd-rag-pin/v1"

// maxPinEnvelope bounds one framed statement (a corpus of many repos).
const maxPinEnvelope = 1 << 20

// PinRepo is one repo of a pin.
type PinRepo struct {
	ID     string `cbor:"id"`
	Branch string `cbor:"branch"`
	Commit string `cbor:"commit"`
}

// PinStatement is the steward's signed word that a corpus began to be
// served at a pin: which commits, which corpus hash, and the statement
// before it in the corpus's pin log (its envelope's SHA-256), so the log
// is a chain a verifier walks from the first statement.
type PinStatement struct {
	Purpose    string    `cbor:"mesh_rag_pin"`
	Steward    string    `cbor:"steward"`
	Corpus     string    `cbor:"corpus"`
	CorpusHash string    `cbor:"corpus_hash"`
	Repos      []PinRepo `cbor:"repos"`
	// Embedded counts the chunks embedded for this pin, Reused the files
	// kept (chunks and vectors) from the pin before.
	Embedded uint64 `cbor:"embedded_chunks"`
	Reused   uint64 `cbor:"reused_files"`
	UnixMs   uint64 `cbor:"unix_ms"`
	// Prev is the SHA-256 of the previous statement's envelope; absent on
	// the first.
	Prev []byte `cbor:"prev,omitempty"`
}

// PinFor is the statement for corpus c served as org/name.
func PinFor(org, name string, c *Corpus, st Stats, unixMs uint64) PinStatement {
	ps := PinStatement{Corpus: org + "/" + name, CorpusHash: c.Hash(), Embedded: uint64(st.Embedded), Reused: uint64(st.Reused), UnixMs: unixMs}
	for _, r := range c.Repos {
		ps.Repos = append(ps.Repos, PinRepo{ID: r.ID, Branch: r.Branch, Commit: r.Commit})
	}
	return ps
}

// AppendPin seals ps with k and appends it to the pin log at path (a
// 4-byte big-endian length, then the envelope), chained to the last
// statement there, and syncs the file. It appends nothing when the last
// statement already names ps's corpus hash (a restart at the same pin),
// and reports whether it appended.
func AppendPin(path string, k *steward.Key, ps PinStatement) (bool, error) {
	prev, err := ReadPins(path, k.Public())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	if n := len(prev); n > 0 {
		if prev[n-1].CorpusHash == ps.CorpusHash {
			return false, nil
		}
		h := sha256.Sum256(prev[n-1].envelope)
		ps.Prev = h[:]
	}
	ps.Purpose, ps.Steward = PinPurpose, k.ID()
	payload, err := wire.EncMode().Marshal(&ps)
	if err != nil {
		return false, fmt.Errorf("pin statement: %w", err)
	}
	env, err := steward.Sign1(k, payload)
	if err != nil {
		return false, fmt.Errorf("pin statement: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(env)))
	if _, err := f.Write(append(rec, env...)); err != nil {
		f.Close()
		return false, fmt.Errorf("pin log %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, fmt.Errorf("pin log %s: %w", path, err)
	}
	return true, f.Close()
}

// SignedPin is a verified statement of a pin log.
type SignedPin struct {
	PinStatement
	envelope []byte
}

// Envelope is the statement's COSE_Sign1 as logged.
func (s SignedPin) Envelope() []byte { return s.envelope }

// ReadPins reads and verifies the pin log at path: every statement signed
// by trusted, of this purpose, in deterministic CBOR, each naming the one
// before. A torn or altered log is an error naming the statement.
func ReadPins(path string, trusted ed25519.PublicKey) ([]SignedPin, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []SignedPin
	var prevEnv []byte
	for i := 0; len(data) > 0; i++ {
		if len(data) < 4 {
			return out, fmt.Errorf("pin log %s: statement %d: %w", path, i, io.ErrUnexpectedEOF)
		}
		n := binary.BigEndian.Uint32(data)
		if n == 0 || n > maxPinEnvelope || int(n) > len(data)-4 {
			return out, fmt.Errorf("pin log %s: statement %d: a length of %d with %d bytes left", path, i, n, len(data)-4)
		}
		env := data[4 : 4+n]
		data = data[4+n:]
		payload, _, err := steward.OpenTrusted(env, func(k ed25519.PublicKey) error {
			if !k.Equal(trusted) {
				return fmt.Errorf("signed by %x, not by the steward %x", []byte(k), []byte(trusted))
			}
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("pin log %s: statement %d: %w", path, i, err)
		}
		var ps PinStatement
		if err := wire.DecMode().Unmarshal(payload, &ps); err != nil {
			return out, fmt.Errorf("pin log %s: statement %d: %w", path, i, err)
		}
		if again, err := wire.EncMode().Marshal(&ps); err != nil || !bytes.Equal(again, payload) || ps.Purpose != PinPurpose {
			return out, fmt.Errorf("pin log %s: statement %d is not a %s statement in deterministic CBOR", path, i, PinPurpose)
		}
		want := []byte(nil)
		if prevEnv != nil {
			h := sha256.Sum256(prevEnv)
			want = h[:]
		}
		if !bytes.Equal(ps.Prev, want) {
			return out, fmt.Errorf("pin log %s: statement %d does not name the statement before it", path, i)
		}
		out = append(out, SignedPin{PinStatement: ps, envelope: bytes.Clone(env)})
		prevEnv = env
	}
	return out, nil
}

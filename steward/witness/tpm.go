// Package witness keeps a receipt log's rollback witness outside its state
// directory: a TPM 2.0 NV counter (package steward's Witness interface),
// which only goes up, so that an older copy of the state directory cannot
// carry the value the node last bound its checkpoint to (PROFILE.md §8, "Rollback witness").
package witness

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
	"github.com/google/go-tpm/tpm2/transport/linuxtpm"
	"github.com/google/go-tpm/tpm2/transport/linuxudstpm"
)

// DefaultIndex is the NV index the counter is defined at unless configured:
// in the owner range (0x01000000-0x013FFFFF), "MS" in its low bytes.
const DefaultIndex uint32 = 0x01004D53

// maxStep bounds how far Advance raises the counter in one call: every
// increment is an NV write, which a TPM's flash endures only so often, and
// a legitimate catch-up is one or two steps.
const maxStep = 1024

// TPM is an NV counter in a TPM 2.0, reached through a character device
// (/dev/tpmrm0) or a unix socket speaking raw TPM commands (swtpm's
// socket interface). It is safe for concurrent use.
type TPM struct {
	path  string
	index tpm2.TPMHandle

	mu      sync.Mutex
	tpm     transport.TPMCloser
	created bool
}

// OpenTPM opens the TPM at path and the NV counter at index (0: DefaultIndex),
// defining the counter (owner authorisation, empty password) if it does not
// exist. An index that exists but is not a counter is refused.
func OpenTPM(ctx context.Context, path string, index uint32) (*TPM, error) {
	if index == 0 {
		index = DefaultIndex
	}
	if index>>24 != 0x01 {
		return nil, fmt.Errorf("tpm witness: NV index %#08x is not an NV index (0x01xxxxxx)", index)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tpm witness: %w", err)
	}
	var t transport.TPMCloser
	if fi.Mode()&os.ModeSocket != 0 {
		t, err = linuxudstpm.Open(path)
	} else {
		t, err = linuxtpm.Open(path)
	}
	if err != nil {
		return nil, fmt.Errorf("tpm witness: open %s: %w", path, err)
	}
	w := &TPM{path: path, index: tpm2.TPMHandle(index), tpm: t}
	if err := w.ensure(ctx); err != nil {
		t.Close()
		return nil, err
	}
	return w, nil
}

// String names the counter for messages: its index and device.
func (w *TPM) String() string {
	return fmt.Sprintf("TPM NV counter %#08x on %s", uint32(w.index), w.path)
}

// Created reports whether OpenTPM defined the counter (it did not exist).
func (w *TPM) Created() bool { return w.created }

// Close closes the connection to the TPM; the counter stays.
func (w *TPM) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tpm == nil {
		return nil
	}
	err := w.tpm.Close()
	w.tpm = nil
	return err
}

func (w *TPM) errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s", w, fmt.Errorf(format, args...))
}

// public reads the index's public area and name.
func (w *TPM) public() (*tpm2.TPMSNVPublic, tpm2.TPM2BName, error) {
	rsp, err := tpm2.NVReadPublic{NVIndex: w.index}.Execute(w.tpm)
	if err != nil {
		return nil, tpm2.TPM2BName{}, err
	}
	pub, err := rsp.NVPublic.Contents()
	if err != nil {
		return nil, tpm2.TPM2BName{}, err
	}
	return pub, rsp.NVName, nil
}

func (w *TPM) ensure(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	pub, _, err := w.public()
	if errors.Is(err, tpm2.TPMRCHandle) {
		def := tpm2.NVDefineSpace{
			AuthHandle: tpm2.TPMRHOwner,
			Auth:       tpm2.TPM2BAuth{},
			PublicInfo: tpm2.New2B(tpm2.TPMSNVPublic{
				NVIndex: w.index,
				NameAlg: tpm2.TPMAlgSHA256,
				// Index authorisation (empty) reads and increments, so
				// the daemon needs the owner's only to define it. Not
				// orderly: every increment reaches NV before it returns.
				Attributes: tpm2.TPMANV{AuthWrite: true, AuthRead: true, OwnerRead: true, NT: tpm2.TPMNTCounter, NoDA: true},
				DataSize:   8,
			}),
		}
		if _, err := def.Execute(w.tpm); err != nil {
			return w.errorf("define (owner authorisation): %w", err)
		}
		w.created = true
		pub, _, err = w.public()
	}
	if err != nil {
		return w.errorf("read public area: %w", err)
	}
	if nt := pub.Attributes.NT; nt != tpm2.TPMNTCounter {
		return w.errorf("the index exists but is not a counter (type %d): configure another index", nt)
	}
	return nil
}

// Read returns the counter's value; written is false for a counter never
// incremented, which has no value yet.
func (w *TPM) Read(ctx context.Context) (value uint64, written bool, err error) {
	if err := ctx.Err(); err != nil {
		return 0, false, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readLocked()
}

func (w *TPM) readLocked() (uint64, bool, error) {
	if w.tpm == nil {
		return 0, false, w.errorf("closed")
	}
	pub, name, err := w.public()
	if err != nil {
		return 0, false, w.errorf("read public area: %w", err)
	}
	if !pub.Attributes.Written {
		return 0, false, nil
	}
	rsp, err := tpm2.NVRead{
		AuthHandle: tpm2.AuthHandle{Handle: w.index, Name: name, Auth: tpm2.PasswordAuth(nil)},
		NVIndex:    tpm2.NamedHandle{Handle: w.index, Name: name},
		Size:       8,
	}.Execute(w.tpm)
	if err != nil {
		return 0, false, w.errorf("read: %w", err)
	}
	var v uint64
	if err := binary.Read(bytes.NewReader(rsp.Data.Buffer), binary.BigEndian, &v); err != nil {
		return 0, false, w.errorf("read: %d bytes: %w", len(rsp.Data.Buffer), err)
	}
	return v, true, nil
}

// Advance increments the counter until it is at least to (at least once if
// it was never written) and returns its value.
func (w *TPM) Advance(ctx context.Context, to uint64) (uint64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v, written, err := w.readLocked()
	if err != nil {
		return 0, err
	}
	if written && to > v && to-v > maxStep {
		return v, w.errorf("refusing to advance from %d to %d: more than %d increments", v, to, maxStep)
	}
	for !written || v < to {
		if err := ctx.Err(); err != nil {
			return v, err
		}
		// The name changes with the written bit, so it is read afresh.
		_, name, err := w.public()
		if err != nil {
			return v, w.errorf("read public area: %w", err)
		}
		if _, err := (tpm2.NVIncrement{
			AuthHandle: tpm2.AuthHandle{Handle: w.index, Name: name, Auth: tpm2.PasswordAuth(nil)},
			NVIndex:    tpm2.NamedHandle{Handle: w.index, Name: name},
		}).Execute(w.tpm); err != nil {
			return v, w.errorf("increment: %w", err)
		}
		if v, written, err = w.readLocked(); err != nil {
			return v, err
		}
		if !written {
			return v, w.errorf("still unwritten after an increment")
		}
	}
	return v, nil
}

// Undefine removes the counter (owner authorisation). Only for tests and
// for an operator adopting a fresh counter deliberately.
func (w *TPM) Undefine(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, name, err := w.public()
	if err != nil {
		return w.errorf("read public area: %w", err)
	}
	if _, err := (tpm2.NVUndefineSpace{AuthHandle: tpm2.TPMRHOwner, NVIndex: tpm2.NamedHandle{Handle: w.index, Name: name}}).Execute(w.tpm); err != nil {
		return w.errorf("undefine: %w", err)
	}
	return nil
}

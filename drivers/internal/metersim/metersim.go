// Package metersim simulates serial power meters on the master side of a
// pseudo-terminal: an RDTech UM meter answering 0xF0 requests, for tests of
// the serial drivers and of discovery.
package metersim

import (
	"encoding/binary"
	"io"
	"sync"
)

// UMFrame builds a 130-byte UM reply with raw register values as the
// meter sends them (voltage and current in the model's own units, power in
// mW).
func UMFrame(model uint16, rawV, rawI uint16, powerMW uint32, tempC uint16) []byte {
	b := make([]byte, 130)
	binary.BigEndian.PutUint16(b[0:], model)
	binary.BigEndian.PutUint16(b[2:], rawV)
	binary.BigEndian.PutUint16(b[4:], rawI)
	binary.BigEndian.PutUint32(b[6:], powerMW)
	binary.BigEndian.PutUint16(b[10:], tempC)
	binary.BigEndian.PutUint16(b[12:], tempC*9/5+32)
	binary.BigEndian.PutUint16(b[128:], 0xFFF1)
	return b
}

// UM answers requests read from rw: for each 0xF0 byte it writes the
// reply that Reply returns (nil: stay silent). Other bytes are ignored,
// as the meters ignore commands they do not know.
type UM struct {
	mu       sync.Mutex
	Reply    func(n int) []byte // n counts requests from 1
	requests int
}

// Requests returns how many 0xF0 requests arrived.
func (u *UM) Requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requests
}

// Serve runs until rw fails (for example, is closed).
func (u *UM) Serve(rw io.ReadWriter) {
	var b [64]byte
	for {
		n, err := rw.Read(b[:])
		if err != nil {
			return
		}
		for _, c := range b[:n] {
			if c != 0xF0 {
				continue
			}
			u.mu.Lock()
			u.requests++
			k := u.requests
			u.mu.Unlock()
			if r := u.Reply(k); r != nil {
				if _, err := rw.Write(r); err != nil {
					return
				}
			}
		}
	}
}

package grant_test

import (
	"bytes"
	"testing"

	"meshd/steward/grant"
	"meshd/wire"
)

func FuzzOpenGrant(f *testing.F) {
	s := issue(f, key(f, 1), base())
	f.Add(s.Envelope)
	f.Add(s.Envelope[:len(s.Envelope)/2])
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := grant.Inspect(b)
		if err != nil {
			return
		}
		// A grant that opens is the one canonical encoding of itself: its
		// id is the content id of exactly these bytes.
		if g.ID != wire.ContentOf(b) || !bytes.Equal(g.Envelope, b) {
			t.Fatal("an opened grant's id is not the content id of its bytes")
		}
	})
}

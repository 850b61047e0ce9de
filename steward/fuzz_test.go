package steward

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"testing"

	"meshd/wire"
)

func FuzzOpenEnvelope(f *testing.F) {
	k := testKey(f)
	st := New(k, nil, Options{})
	r, err := st.Build(draft(1), 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		f.Fatal(err)
	}
	core, _ := r.EncodeCore()
	env, _ := Sign1(k, core)
	f.Add(env)
	f.Add(core)
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40})
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, 32))
	f.Add(fSign1(priv, fMap(foreignFields(priv.Public().(ed25519.PublicKey)))))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := OpenEnvelope(b, nil)
		if err != nil {
			if ReasonOf(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		// Anything that opens satisfies every conforming rule, is the one
		// canonical envelope of its kid, core and signature, and its
		// receipt re-encodes to exactly the signed core.
		if err := o.Receipt.CheckConforming(); err != nil {
			t.Fatalf("opened envelope breaks the rules: %v", err)
		}
		canon := append([]byte{0xd2, 0x84}, protectedBstr...)
		canon = append(append(canon, o.Key...), 0xa0)
		canon = wire.AppendBytes(canon, o.Core)
		canon = append(append(canon, sigHead...), b[len(b)-ed25519.SignatureSize:]...)
		if !bytes.Equal(canon, b) {
			t.Fatalf("accepted envelope is not its canonical encoding")
		}
		again, err := o.Receipt.EncodeCore()
		if err != nil || !bytes.Equal(again, o.Core) {
			t.Fatalf("opened core is not canonical: %v", err)
		}
	})
}

func FuzzScanLog(f *testing.F) {
	_, seg, _ := writeLog(f, 3)
	good, err := os.ReadFile(seg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(append([]byte("MESHLOG2"), 0, 0, 0, 4, 0, 0, 0, 0, 1, 2, 3, 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ScanSegment(context.Background(), bytes.NewReader(b), 0, nil, nil)
		if err != nil {
			return
		}
		// What is not valid must be a torn tail, accounted for to the byte.
		if rep.Size+rep.TornBytes != int64(len(b)) {
			t.Fatalf("scan accounted for %d+%d of %d bytes", rep.Size, rep.TornBytes, len(b))
		}
	})
}

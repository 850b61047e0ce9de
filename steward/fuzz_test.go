package steward

import (
	"bytes"
	"os"
	"testing"
)

func FuzzOpenEnvelope(f *testing.F) {
	k := testKey(f)
	st := New(k, nil, Options{})
	r, err := st.Build(draft(1), 0, nil, make([]byte, NonceSize), testClock())
	if err != nil {
		f.Fatal(err)
	}
	core, _ := r.EncodeCore()
	env, _ := SealCore(k, core)
	f.Add(env)
	f.Add(core)
	f.Add([]byte{0xd2, 0x84, 0x40, 0xa0, 0x40, 0x40})
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := OpenEnvelope(b, nil)
		if err != nil {
			return
		}
		// Anything that opens must satisfy every rule and re-encode to
		// exactly the signed core.
		if err := o.Receipt.Check(); err != nil {
			t.Fatalf("opened envelope breaks the rules: %v", err)
		}
		again, err := o.Receipt.EncodeCore()
		if err != nil || !bytes.Equal(again, o.Core) {
			t.Fatalf("opened core is not canonical")
		}
	})
}

func FuzzScanLog(f *testing.F) {
	path, _ := writeLog(f, 3)
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add(append([]byte("MESHLOG1"), 0, 0, 0, 4, 0, 0, 0, 0, 1, 2, 3, 4))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := Scan(bytes.NewReader(b), nil, nil)
		if err != nil {
			return
		}
		if rep.Size+rep.TornBytes != int64(len(b)) && !(rep.Size == 0 && len(b) == 0) {
			t.Fatalf("scan accounted for %d+%d of %d bytes", rep.Size, rep.TornBytes, len(b))
		}
	})
}

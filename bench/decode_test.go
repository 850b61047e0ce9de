package bench

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"lukechampine.com/blake3"
)

// TestDecodeCanonical: for canonical files decodeCanonical gives exactly
// what Decode gives, the same report or the same error, on a real report
// and on canonical texts shaped to trip its cut: an envelope with an
// escape, member names encoding/json would also read into the chain or
// its envelopes, an envelope that is not a string, an empty chain, a
// type error after the envelopes, an unknown member.
func TestDecodeCanonical(t *testing.T) {
	s := startStack(t, fmt.Sprintf(benchBackends, ""))
	path, _ := runToFile(t, s, testWorkload(t, ""), false, nil)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replace := func(old, new string) []byte {
		t.Helper()
		if !bytes.Contains(data, []byte(old)) {
			t.Fatalf("no %q in the report", old)
		}
		return bytes.Replace(data, []byte(old), []byte(new), 1)
	}
	for _, tc := range []struct {
		name string
		data []byte
		cut  bool // whether the fast path should take it
		ok   bool // whether it decodes
	}{
		{"the report", data, true, true},
		{"an envelope with an escape", replace(`"envelopes":["`, `"envelopes":["\n`), false, true},
		{"an envelope that is not a string", replace(`"envelopes":["`, `"envelopes":[1,"`), false, false},
		{"no envelopes", replace(`"envelopes":["`, `"envelopes":[],"envelopez":["`), false, false},
		{"a second chain member", replace(`"body":{`, `"body":{"Chain":{"first":5},`), false, true},
		{"a second envelopes member", replace(`"chain":{`, `"chain":{"Envelopes":["a"],`), false, true},
		{"a second body member", replace(`{"body":{`, `{"BODY":{"format":"x"},"body":{`), false, true},
		{"a type error after the envelopes", replace(`"interval_ms":`, `"interval_ms":"x","interval_msx":`), false, false},
		{"an unknown member", replace(`{"body":{`, `{"a":1,"body":{`), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !canonicalFile(tc.data) {
				t.Fatal("the case is not canonical: it tests nothing")
			}
			if got := decodeCut(tc.data) != nil; got != tc.cut {
				t.Errorf("the cut takes it: %v, want %v", got, tc.cut)
			}
			want, werr := Decode(tc.data)
			got, gerr := decodeCanonical(tc.data)
			if (werr == nil) != tc.ok {
				t.Fatalf("Decode: %v, want it to decode %v", werr, tc.ok)
			}
			if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeCanonical: %v (%d envelopes); Decode: %v (%d envelopes)", gerr, envCount(got), werr, envCount(want))
			}
		})
	}
	// The cut's strings are the envelopes themselves.
	if rep := decodeCut(data); rep == nil || len(rep.Body.Chain.Envelopes) == 0 || !strings.Contains(string(data), `"`+rep.Body.Chain.Envelopes[0]+`"`) {
		t.Fatal("the cut does not read the envelopes")
	}
}

func envCount(r *Report) int {
	if r == nil {
		return -1
	}
	return len(r.Body.Chain.Envelopes)
}

// TestSkipString: skipString ends a string where a byte-by-byte reading
// of its escapes does, over every string of up to seven bytes drawn from
// a quote, a backslash and a letter.
func TestSkipString(t *testing.T) {
	slow := func(b []byte, i int) int {
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
		return len(b)
	}
	alphabet := []byte{'"', '\\', 'a'}
	var walk func(b []byte)
	walk = func(b []byte) {
		for i := range b {
			if b[i] == '"' {
				if got, want := skipString(b, i), slow(b, i); got != want {
					t.Fatalf("skipString(%q, %d) = %d, want %d", b, i, got, want)
				}
			}
		}
		if len(b) == 7 {
			return
		}
		for _, c := range alphabet {
			walk(append(b, c))
		}
	}
	walk(nil)
}

// TestBenchPromptStream: the prompt's words are BLAKE3's output stream
// read through the XOF at every length, on both sides of the 64 bytes
// that Sum512 gives.
func TestBenchPromptStream(t *testing.T) {
	for _, words := range []int{0, 1, 4, 16, 63, 64, 65, 100, 300} {
		for _, warm := range []bool{false, true} {
			seed := fmt.Sprintf("meshd-bench/v1 prompt=%d output=%d rep=%d warmup=%t", words, 8, 3, warm)
			x := blake3.New(32, nil)
			x.Write([]byte(seed))
			buf := make([]byte, words)
			if _, err := io.ReadFull(x.XOF(), buf); err != nil {
				t.Fatal(err)
			}
			ws := make([]string, words)
			for i, v := range buf {
				ws[i] = benchWords[int(v)%len(benchWords)]
			}
			if got, want := benchPrompt(words, 8, 3, warm), strings.Join(ws, " "); got != want {
				t.Errorf("%d words (warm-up %v): %q, the stream gives %q", words, warm, got, want)
			}
		}
	}
}

package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"meshd/wire"
)

// TestStopCutter feeds outputs piece by piece and checks that what is
// released is the text before the first stop string, that no released
// piece carries a byte of a stop string that later completes, and the
// stopped flag.
func TestStopCutter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    []string
		pieces  []string
		want    string
		stopped bool
	}{
		{"no stop", nil, []string{"ab", "cd"}, "abcd", false},
		{"inside a piece", []string{"c"}, []string{"ab", "cd"}, "ab", true},
		{"across pieces", []string{"bc"}, []string{"ab", "cd"}, "a", true},
		{"at the start", []string{"a"}, []string{"ab"}, "", true},
		{"a prefix never completed is released", []string{"bx"}, []string{"ab", "cd"}, "abcd", false},
		{"the earliest of several", []string{"d", "b"}, []string{"abcd"}, "a", true},
		{"overlapping prefixes", []string{"aab"}, []string{"a", "a", "a", "b", "z"}, "a", true},
		{"multi-byte", []string{"é"}, []string{"caf", "\xc3", "\xa9s"}, "caf", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewStopCutter(tc.stop)
			var got []byte
			stopped := false
			for _, p := range tc.pieces {
				out, s := c.Add([]byte(p))
				got = append(got, out...)
				if !strings.HasPrefix(tc.want, string(got)) {
					t.Fatalf("released %q, which is not a prefix of %q", got, tc.want)
				}
				stopped = stopped || s
			}
			got = append(got, c.Flush()...)
			if string(got) != tc.want || stopped != tc.stopped || !bytes.Equal(c.Output(), got) {
				t.Fatalf("got %q stopped %v (output %q), want %q stopped %v", got, stopped, c.Output(), tc.want, tc.stopped)
			}
		})
	}
}

// TestReferenceStop: a stop string taken from the unstopped output cuts
// it there, streamed and not, and the outcome counts only the tokens
// whose text was delivered.
func TestReferenceStop(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 1})
	if err != nil {
		t.Fatal(err)
	}
	const prompt = "say something long"
	ctx := context.Background()
	full, err := r.Serve(ctx, refReq(prompt, 12), []byte(prompt))
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(string(full.Output))
	// The fourth word's first occurrence: everything before it is kept.
	stop := words[3]
	at := strings.Index(string(full.Output), stop)
	wantTokens := uint32(len(strings.Fields(string(full.Output)[:at])))
	if !strings.HasSuffix(string(full.Output)[:at], " ") {
		t.Fatalf("test assumes %q starts a word in %q", stop, full.Output)
	}
	for _, stream := range []bool{false, true} {
		var pieces [][]byte
		opts := Options{Stop: []string{"never-made", stop}}
		if stream {
			opts.Emit = func(p []byte) error { pieces = append(pieces, p); return nil }
		}
		res, err := r.ServeWith(ctx, refReq(prompt, 12), []byte(prompt), opts)
		if err != nil {
			t.Fatal(err)
		}
		if want := string(full.Output)[:at]; string(res.Output) != want || !res.Stopped {
			t.Fatalf("stream %v: output %q stopped %v, want %q stopped", stream, res.Output, res.Stopped, want)
		}
		// The trailing space is the first byte of the token whose word is
		// the stop string: part of it was delivered, so it counts.
		if res.Outcome.TokensOut != wantTokens+1 || res.Outcome.TokensAccepted != res.Outcome.TokensOut {
			t.Fatalf("stream %v: outcome %+v, want %d tokens (the last one's space delivered)", stream, res.Outcome, wantTokens+1)
		}
		if stream && string(bytes.Join(pieces, nil)) != string(res.Output) {
			t.Fatalf("streamed %q, output %q", bytes.Join(pieces, nil), res.Output)
		}
	}
	// No match: the whole output, not stopped.
	res, err := r.ServeWith(ctx, refReq(prompt, 12), []byte(prompt), Options{Stop: []string{"zzz"}})
	if err != nil || string(res.Output) != string(full.Output) || res.Stopped || res.Outcome != full.Outcome {
		t.Fatalf("an unmatched stop changed the serve: %q %+v %v, err %v", res.Output, res.Outcome, res.Stopped, err)
	}
	for _, bad := range [][]string{{"a", "b", "c", "d", "e"}, {""}} {
		if _, err := r.ServeWith(ctx, refReq(prompt, 12), []byte(prompt), Options{Stop: bad}); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("stop %q: err %v, want ErrBadRequest", bad, err)
		}
	}
}

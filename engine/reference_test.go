package engine

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"meshd/wire"
)

func refReq(prompt string, max uint32) wire.ServeRequest {
	return wire.ServeRequest{PromptHash: wire.ContentOf([]byte(prompt)), PromptTokens: 1, MaxTokens: max, FidelityFloor: wire.F0, JouleCeilingUJ: 1}
}

func TestReferenceDeterministic(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 3})
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	c, _ := r.Serve(context.Background(), refReq("x", 12), []byte("another prompt"))
	if !bytes.Equal(a.Output, b.Output) || bytes.Equal(a.Output, c.Output) {
		t.Fatalf("output must be a function of the prompt: %q %q %q", a.Output, b.Output, c.Output)
	}
	want := wire.ServeOutcome{TokensIn: 3, TokensOut: 12, TokensAccepted: 12}
	if a.Outcome != want || len(bytes.Fields(a.Output)) != 12 {
		t.Fatalf("outcome %+v output %q", a.Outcome, a.Output)
	}
	// The work knob changes the tokens (more hashing per token), so a
	// heavier backend is not the light one under another name.
	h, _ := NewReference(ReferenceConfig{Name: "h", Fidelity: wire.F1, UJPerToken: 5, Work: 4})
	d, _ := h.Serve(context.Background(), refReq("x", 12), []byte("three little words"))
	if bytes.Equal(a.Output, d.Output) {
		t.Fatal("work factor has no effect on the computation")
	}
}

func TestReferenceRefusesAndCancels(t *testing.T) {
	for _, c := range []ReferenceConfig{
		{Fidelity: wire.F1, UJPerToken: 1, Work: 1},
		{Name: "x", Fidelity: 9, UJPerToken: 1, Work: 1},
		{Name: "x", Fidelity: wire.F1, Work: 1},
		{Name: "x", Fidelity: wire.F1, UJPerToken: 1},
	} {
		if _, err := NewReference(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
	r, _ := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Serve(ctx, refReq("x", 4), []byte("p")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled serve: %v", err)
	}
}

// TestReferenceStreaming checks that the emitted pieces concatenate to the
// output, that streaming changes nothing about the answer, and that an
// Emit error stops generation at once.
func TestReferenceStreaming(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 2})
	if err != nil {
		t.Fatal(err)
	}
	errGone := errors.New("client went away")
	for _, tc := range []struct {
		name      string
		max       uint32
		failAt    int // the Emit call (1-based) that fails; 0: none
		wantCalls int
	}{
		{name: "one token", max: 1, wantCalls: 1},
		{name: "many tokens", max: 17, wantCalls: 17},
		{name: "fail on the first piece", max: 10, failAt: 1, wantCalls: 1},
		{name: "fail mid-stream", max: 10, failAt: 4, wantCalls: 4},
		{name: "fail on the last piece", max: 10, failAt: 10, wantCalls: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := []byte("stream these words")
			plain, err := r.Serve(context.Background(), refReq("x", tc.max), prompt)
			if err != nil {
				t.Fatal(err)
			}
			var pieces [][]byte
			res, err := r.ServeWith(context.Background(), refReq("x", tc.max), prompt, Options{Emit: func(p []byte) error {
				pieces = append(pieces, p)
				if len(pieces) == tc.failAt {
					return errGone
				}
				return nil
			}})
			if len(pieces) != tc.wantCalls {
				t.Fatalf("%d pieces emitted, want %d", len(pieces), tc.wantCalls)
			}
			for i, p := range pieces {
				if (i == 0) == bytes.HasPrefix(p, []byte(" ")) || len(bytes.Fields(p)) != 1 {
					t.Fatalf("piece %d = %q", i, p)
				}
			}
			if tc.failAt > 0 {
				if !errors.Is(err, errGone) || res.Output != nil || res.Outcome != (wire.ServeOutcome{}) {
					t.Fatalf("abandoned serve = %+v, %v; want no result and the Emit error", res, err)
				}
				if !bytes.HasPrefix(plain.Output, bytes.Join(pieces, nil)) {
					t.Fatalf("pieces %q are not a prefix of %q", pieces, plain.Output)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Join(pieces, nil); !bytes.Equal(got, res.Output) {
				t.Fatalf("pieces concatenate to %q, output is %q", got, res.Output)
			}
			if !bytes.Equal(res.Output, plain.Output) || res.Outcome != plain.Outcome {
				t.Fatalf("streamed %+v %q, plain %+v %q", res.Outcome, res.Output, plain.Outcome, plain.Output)
			}
		})
	}
}

func TestReferenceChat(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		prompt   string
		rendered string
	}{
		{name: "one message", prompt: `[{"role":"user","content":"hello there"}]`, rendered: "user: hello there\nassistant:"},
		{
			name:     "conversation",
			prompt:   `[{"role":"system","content":"be brief"},{"content":"hi","role":"user"},{"role":"assistant","content":"hello"},{"role":"user","content":""}]`,
			rendered: "system: be brief\nuser: hi\nassistant: hello\nuser: \nassistant:",
		},
		{name: "escapes and whitespace", prompt: ` [ {"role":"user","content":"a\tb\n\u00e9"} ] `, rendered: "user: a\tb\né\nassistant:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs, err := ParseChat([]byte(tc.prompt))
			if err != nil {
				t.Fatal(err)
			}
			if got := RenderReferenceChat(msgs); got != tc.rendered {
				t.Fatalf("rendered %q, want %q", got, tc.rendered)
			}
			var pieces [][]byte
			chat, err := r.ServeWith(context.Background(), refReq(tc.prompt, 6), []byte(tc.prompt),
				Options{Chat: true, Emit: func(p []byte) error { pieces = append(pieces, p); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			// The engine reads the rendered text: the answer is that of a
			// plain serve of it, and tokens_in counts its words.
			plain, err := r.Serve(context.Background(), refReq(tc.rendered, 6), []byte(tc.rendered))
			if err != nil {
				t.Fatal(err)
			}
			want := wire.ServeOutcome{TokensIn: uint32(len(strings.Fields(tc.rendered))), TokensOut: 6, TokensAccepted: 6}
			if chat.Outcome != want || plain.Outcome != want || !bytes.Equal(chat.Output, plain.Output) {
				t.Fatalf("chat %+v %q, plain %+v %q, want %+v", chat.Outcome, chat.Output, plain.Outcome, plain.Output, want)
			}
			if !bytes.Equal(bytes.Join(pieces, nil), chat.Output) {
				t.Fatalf("pieces %q, output %q", pieces, chat.Output)
			}
		})
	}
}

func TestReferenceChatRejectsBadMessages(t *testing.T) {
	r, err := NewReference(ReferenceConfig{Name: "r", Fidelity: wire.F1, UJPerToken: 5, Work: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, prompt, errHas string }{
		{"empty", ``, "not JSON"},
		{"not json", `hello`, "not JSON"},
		{"object", `{"role":"user","content":"x"}`, "array of messages"},
		{"string", `"hi"`, "array of messages"},
		{"empty array", `[]`, "no messages"},
		{"null element", `[null]`, "message 0 is not an object"},
		{"string element", `[{"role":"user","content":"x"},"x"]`, "message 1 is not an object"},
		{"no role", `[{"content":"x"}]`, "message 0 has no role"},
		{"no content", `[{"role":"user"}]`, "message 0 has no content"},
		{"empty role", `[{"role":"","content":"x"}]`, "empty role"},
		{"role not a string", `[{"role":1,"content":"x"}]`, "role must be a string"},
		{"null content", `[{"role":"user","content":null}]`, "content must be a string"},
		{"content parts", `[{"role":"user","content":[{"type":"text","text":"x"}]}]`, "content must be a string"},
		{"extra field", `[{"role":"user","content":"x","name":"bob"}]`, `field "name"`},
		{"duplicate key", `[{"role":"user","role":"system","content":"x"}]`, `repeats "role"`},
		{"trailing data", `[{"role":"user","content":"x"}] []`, "trailing data"},
		{"trailing comma", `[{"role":"user","content":"x"},]`, "message 1"},
		{"unterminated", `[{"role":"user","content":"x"}`, "EOF"},
		{"invalid utf-8", "[{\"role\":\"user\",\"content\":\"\xff\"}]", "UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emitted := 0
			res, err := r.ServeWith(context.Background(), refReq(tc.prompt, 4), []byte(tc.prompt),
				Options{Chat: true, Emit: func([]byte) error { emitted++; return nil }})
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("ServeWith = %+v, %v; want ErrBadRequest naming %q", res.Outcome, err, tc.errHas)
			}
			if emitted != 0 || res.Output != nil {
				t.Fatalf("a refused chat emitted %d pieces, output %q", emitted, res.Output)
			}
		})
	}
	// The same bytes are a fine plain prompt.
	if _, err := r.ServeWith(context.Background(), refReq("x", 2), []byte(`[]`), Options{}); err != nil {
		t.Fatal(err)
	}
}

package api

import (
	"bytes"
	"io"
	"net/http"
	"unicode/utf8"
)

// decodeServeBody is decodeBody for the mesh/1 serve request, the body
// every serve sends. encoding/json's reflective decode was a good part of
// the request's way in; most bodies are a handful of plain fields, and
// parseServeBody takes those directly. It takes only what it can read
// exactly as encoding/json would (a strict subset of JSON: the body's
// exact field names once each, strings without escapes in valid UTF-8,
// unsigned integers without sign, fraction or exponent that fit their
// field, true or false); anything else, valid or not, is decoded again by
// decodeBody's own decoder over the same bytes, so every error, its
// message and offset, and every value that fast path does not take, are
// encoding/json's.
func decodeServeBody(w http.ResponseWriter, r *http.Request, limit int64, b *serveBody) bool {
	n := r.ContentLength
	if n <= 0 || n > limit {
		// Chunked, or over the limit: the streaming decoder reads as far as
		// it must, and the limit's error is its.
		return decodeBody(w, r, b)
	}
	data, err := readN(r.Body, int(n))
	if err == nil && parseServeBody(data, b) {
		return true
	}
	*b = serveBody{}
	// The bytes read, then what reading more gave: the decoder meets the
	// same stream it would have read itself.
	var rest io.Reader = &errReader{err: err}
	if err == nil {
		rest = bytes.NewReader(nil)
	}
	return decodeFrom(w, io.MultiReader(bytes.NewReader(data), rest), b)
}

// readN reads a body of n announced bytes: all of them, or those that came
// and the error that ended them. The server holds the body to its
// Content-Length, so a complete read is the whole body. Not io.ReadFull:
// it turns an early EOF into io.ErrUnexpectedEOF, and the fallback
// decoder must meet the error the body itself gave.
func readN(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, n)
	got := 0
	for got < n {
		k, err := r.Read(buf[got:])
		got += k
		if err != nil {
			if err == io.EOF && got == n {
				break
			}
			return buf[:got], err
		}
	}
	return buf, nil
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// serveBodyField names serveBody's fields as the fast path knows them.
const (
	fPrompt = 1 << iota
	fMaxTokens
	fPromptTokens
	fFidelityFloor
	fJouleCeiling
	fGrant
	fRun
	fTimeFirstToken
)

// parseServeBody decodes data into b when data is one JSON object in the
// subset decodeServeBody describes, followed by nothing but whitespace,
// and reports whether it did. b is left partly set when it did not.
func parseServeBody(data []byte, b *serveBody) bool {
	p := bodyParser{data: data}
	if !p.byte('{') {
		return false
	}
	seen := 0
	if !p.peek('}') {
		for {
			key, ok := p.raw()
			if !ok || !p.byte(':') {
				return false
			}
			var bit int
			// A switch on string(key) compares without allocating.
			switch string(key) {
			case "prompt":
				bit, ok = fPrompt, p.str(&b.Prompt)
			case "grant":
				bit, ok = fGrant, p.str(&b.Grant)
			case "max_tokens":
				bit, ok = fMaxTokens, uintField(&p, &b.MaxTokens)
			case "prompt_tokens":
				bit, ok = fPromptTokens, uintField(&p, &b.PromptTokens)
			case "fidelity_floor":
				bit, ok = fFidelityFloor, uintField(&p, &b.FidelityFloor)
			case "joule_ceiling_uj":
				bit, ok = fJouleCeiling, uintField(&p, &b.JouleCeilingUJ)
			case "run":
				bit, ok = fRun, uintField(&p, &b.Run)
			case "time_first_token":
				b.TimeFirstToken, ok = p.bool()
				bit = fTimeFirstToken
			default:
				// encoding/json matches names without regard to case and
				// skips unknown ones: its decode decides.
				return false
			}
			if !ok || seen&bit != 0 {
				return false // a repeated field: encoding/json's rules apply
			}
			seen |= bit
			if p.byte(',') {
				continue
			}
			break
		}
	}
	if !p.byte('}') {
		return false
	}
	p.space()
	return p.i == len(p.data)
}

// bodyParser reads the fast path's subset of JSON from data.
type bodyParser struct {
	data []byte
	i    int
}

func (p *bodyParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c after any whitespace, reporting whether it was there.
func (p *bodyParser) byte(c byte) bool {
	if p.peek(c) {
		p.i++
		return true
	}
	return false
}

// peek skips whitespace and reports whether c comes next.
func (p *bodyParser) peek(c byte) bool {
	p.space()
	return p.i < len(p.data) && p.data[p.i] == c
}

// raw reads a string's contents when it has no escape, no control
// character and only valid UTF-8: then they are the decoded string.
func (p *bodyParser) raw() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	ascii := true
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			s := p.data[start:p.i]
			p.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		p.i++
	}
	return nil, false
}

// str reads a plain string into *dst.
func (p *bodyParser) str(dst **string) bool {
	s, ok := p.raw()
	if ok {
		v := string(s)
		*dst = &v
	}
	return ok
}

// uintField reads an unsigned integer that fits T into *dst.
func uintField[T uint8 | uint32 | uint64](p *bodyParser, dst **T) bool {
	v, ok := p.uint(uint64(^T(0)))
	if ok {
		t := T(v)
		*dst = &t
	}
	return ok
}

// uint reads an unsigned integer literal of at most max: digits only, no
// leading zero, as encoding/json reads into an unsigned field without
// error. What follows it is checked by the caller's next token.
func (p *bodyParser) uint(max uint64) (uint64, bool) {
	p.space()
	start := p.i
	var v uint64
	for p.i < len(p.data) {
		c := p.data[p.i]
		if c < '0' || c > '9' {
			break
		}
		d := uint64(c - '0')
		if v > (max-d)/10 {
			return 0, false
		}
		v = v*10 + d
		p.i++
	}
	n := p.i - start
	if n == 0 || (n > 1 && p.data[start] == '0') {
		return 0, false
	}
	// "1.5", "1e3" and the like: the caller would see '.' or 'e' where it
	// wants ',' or '}', and refuse.
	return v, true
}

func (p *bodyParser) bool() (bool, bool) {
	p.space()
	rest := p.data[p.i:]
	switch {
	case bytes.HasPrefix(rest, []byte("true")):
		p.i += 4
		return true, true
	case bytes.HasPrefix(rest, []byte("false")):
		p.i += 5
		return false, true
	}
	return false, false
}

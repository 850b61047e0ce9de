package rag

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// The refusals of Canonical and CanonicalValue. Each is wrapped with the
// position or value it concerns, so callers match them with errors.Is.
var (
	// ErrJSONSyntax is input that is not JSON (RFC 8259) at all.
	ErrJSONSyntax = errors.New("rag: jcs: not JSON")
	// ErrDuplicateKey is an object naming one key twice, at any depth. JCS
	// cannot say which of the two a signer meant, so it refuses both.
	ErrDuplicateKey = errors.New("rag: jcs: duplicate object key")
	// ErrLoneSurrogate is a \u escape of a UTF-16 surrogate that is not one
	// half of a high-low pair: it names no Unicode scalar value.
	ErrLoneSurrogate = errors.New("rag: jcs: lone UTF-16 surrogate")
	// ErrInvalidUTF8 is a string (or, for CanonicalValue, a Go string) that is
	// not valid UTF-8.
	ErrInvalidUTF8 = errors.New("rag: jcs: invalid UTF-8")
	// ErrNumberOutOfRange is a number no IEEE 754 double can hold: a literal
	// past ±1.7976931348623157e308, NaN or an infinity, or a Go integer past
	// ±2^53, which a double holds only approximately.
	ErrNumberOutOfRange = errors.New("rag: jcs: number not representable as an IEEE 754 double")
	// ErrTrailingData is anything but whitespace after the top-level value.
	ErrTrailingData = errors.New("rag: jcs: data after the JSON value")
	// ErrTooDeep is nesting past MaxDepth.
	ErrTooDeep = errors.New("rag: jcs: nesting too deep")
	// ErrUnsupportedType is a Go value CanonicalValue has no JSON form for.
	ErrUnsupportedType = errors.New("rag: jcs: unsupported Go type")
)

// MaxDepth is how many arrays and objects may nest. RFC 8785 sets no limit;
// this one exists so untrusted input cannot exhaust the stack, and it is far
// above anything the contract carries.
const MaxDepth = 1000

// maxExactInteger is 2^53: every integer of at most this magnitude is an
// exact double, and ECMAScript prints it digit for digit.
const maxExactInteger = 1 << 53

// Canonical re-encodes a JSON text in the RFC 8785 (JCS) canonical form:
// object members sorted by the UTF-16 code units of their keys, no
// whitespace, strings with JCS's minimal escaping, and numbers in ECMAScript's
// shortest round-trip form. It refuses what JCS cannot canonicalise rather than
// guessing: duplicate keys, lone surrogates, invalid UTF-8, numbers past the
// double range, and trailing data.
func Canonical(data []byte) ([]byte, error) {
	v, err := parseJSON(data)
	if err != nil {
		return nil, err
	}
	return CanonicalValue(v)
}

// CanonicalValue is the JCS canonical JSON of a Go value: map[string]any,
// []any, string, json.Number, int, int64, uint64, float64, bool or nil, nested
// freely. Integers must lie within ±2^53 and floats must be finite, since JCS
// numbers are IEEE 754 doubles and anything else would be silently rounded.
func CanonicalValue(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := writeCanonical(&b, v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func writeCanonical(b *bytes.Buffer, v any, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: more than %d levels", ErrTooDeep, MaxDepth)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case string:
		return writeString(b, x)
	case json.Number:
		f, err := parseNumber(string(x))
		if err != nil {
			return err
		}
		b.WriteString(formatNumber(f))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("%w: %v", ErrNumberOutOfRange, x)
		}
		b.WriteString(formatNumber(x))
	case int:
		return writeInteger(b, int64(x))
	case int64:
		return writeInteger(b, x)
	case uint64:
		if x > maxExactInteger {
			return fmt.Errorf("%w: %d is past 2^53", ErrNumberOutOfRange, x)
		}
		b.WriteString(strconv.FormatUint(x, 10))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, e, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		return writeObject(b, x, depth)
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedType, v)
	}
	return nil
}

func writeInteger(b *bytes.Buffer, x int64) error {
	if x > maxExactInteger || x < -maxExactInteger {
		return fmt.Errorf("%w: %d is past ±2^53", ErrNumberOutOfRange, x)
	}
	b.WriteString(strconv.FormatInt(x, 10))
	return nil
}

func writeObject(b *bytes.Buffer, m map[string]any, depth int) error {
	type member struct {
		key   string
		units []uint16
	}
	members := make([]member, 0, len(m))
	for k := range m {
		if !utf8.ValidString(k) {
			return fmt.Errorf("%w: object key %q", ErrInvalidUTF8, k)
		}
		members = append(members, member{key: k, units: utf16.Encode([]rune(k))})
	}
	// RFC 8785 §3.2.3 sorts by UTF-16 code units, not by code points or UTF-8
	// bytes: a key with a character past U+FFFF (a surrogate pair, 0xD8xx)
	// sorts before one with a character in U+E000..U+FFFF.
	slices.SortFunc(members, func(a, c member) int { return slices.Compare(a.units, c.units) })
	b.WriteByte('{')
	for i, mem := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := writeString(b, mem.key); err != nil {
			return err
		}
		b.WriteByte(':')
		if err := writeCanonical(b, m[mem.key], depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// writeString writes s with exactly JCS's escaping (RFC 8785 §3.2.2.2): the
// two-character escapes for " \ and the five named controls, \u00xx in
// lowercase hex for the other controls, and every other character, '/' and
// non-ASCII included, as itself.
func writeString(b *bytes.Buffer, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: string %q", ErrInvalidUTF8, s)
	}
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return nil
}

// parseNumber reads a JSON number literal as the double ECMAScript's
// JSON.parse would: the nearest double, an underflow becoming zero. A literal
// past the largest double is refused, where JSON.parse would say Infinity,
// which no JSON text can carry back.
func parseNumber(lit string) (float64, error) {
	if !validNumberLiteral(lit) {
		return 0, fmt.Errorf("%w: number %q", ErrJSONSyntax, lit)
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		// ParseFloat also reports ErrRange for an underflow, whose result (0
		// or a subnormal) is still the right double; only ±Inf is refused.
		if !errors.Is(err, strconv.ErrRange) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%w: %s", ErrNumberOutOfRange, lit)
		}
	}
	return f, nil
}

// validNumberLiteral is RFC 8259's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumberLiteral(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// formatNumber is ECMAScript's Number::toString(x) for a finite double (ECMA-262
// §6.1.6.1.20), which RFC 8785 §3.2.2.3 adopts. strconv's shortest 'e' form
// gives the digits s and exponent n that step 5 asks for (the fewest digits
// that round-trip, nearest the value on a tie); the cases below place the
// decimal point exactly as that algorithm does.
func formatNumber(x float64) string {
	if x == 0 {
		return "0" // both +0 and -0
	}
	if x < 0 {
		return "-" + formatNumber(-x)
	}
	sci := strconv.FormatFloat(x, 'e', -1, 64) // d[.ddd]e±XX
	mantissa, exponent, _ := strings.Cut(sci, "e")
	digits := strings.Replace(mantissa, ".", "", 1)
	e, _ := strconv.Atoi(exponent)
	k, n := len(digits), e+1 // x = 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		return digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		return digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		return "0." + strings.Repeat("0", -n) + digits
	}
	out := digits[:1]
	if k > 1 {
		out += "." + digits[1:]
	}
	if n-1 >= 0 {
		return out + "e+" + strconv.Itoa(n-1)
	}
	return out + "e-" + strconv.Itoa(1-n)
}

// parseJSON reads one JSON text into map[string]any, []any, string,
// json.Number, bool and nil, refusing everything JCS cannot canonicalise.
// encoding/json is not used because it accepts duplicate keys and lone
// surrogates (replacing them with U+FFFD), which would let two different
// texts canonicalise to the same bytes.
func parseJSON(data []byte) (any, error) {
	p := &jsonParser{data: data}
	p.skipSpace()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, fmt.Errorf("%w: at byte %d", ErrTrailingData, p.pos)
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	pos  int
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) syntax(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrJSONSyntax, what, p.pos)
}

func (p *jsonParser) value(depth int) (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.syntax("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.string()
	case c == '-' || isDigit(c):
		return p.number()
	case p.literal("true"):
		return true, nil
	case p.literal("false"):
		return false, nil
	case p.literal("null"):
		return nil, nil
	default:
		return nil, p.syntax(fmt.Sprintf("unexpected byte 0x%02x", c))
	}
}

func (p *jsonParser) literal(word string) bool {
	if bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		p.pos += len(word)
		return true
	}
	return false
}

func (p *jsonParser) object(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels", ErrTooDeep, MaxDepth)
	}
	p.pos++ // {
	m := map[string]any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return m, nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.syntax("expected an object key")
		}
		keyAt := p.pos
		k, err := p.string()
		if err != nil {
			return nil, err
		}
		// Keys are compared after unescaping: "a" and "\u0061" are one key.
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%w: %q at byte %d", ErrDuplicateKey, k, keyAt)
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.syntax("expected ':'")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("unterminated object")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return m, nil
		default:
			return nil, p.syntax("expected ',' or '}'")
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels", ErrTooDeep, MaxDepth)
	}
	p.pos++ // [
	a := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return a, nil
	}
	for {
		p.skipSpace()
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.syntax("unterminated array")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return a, nil
		default:
			return nil, p.syntax("expected ',' or ']'")
		}
	}
}

func (p *jsonParser) number() (any, error) {
	start := p.pos
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if !isDigit(c) && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
		p.pos++
	}
	lit := string(p.data[start:p.pos])
	if _, err := parseNumber(lit); err != nil {
		return nil, fmt.Errorf("at byte %d: %w", start, err)
	}
	return json.Number(lit), nil
}

func (p *jsonParser) string() (string, error) {
	p.pos++ // opening quote
	var b strings.Builder
	for {
		if p.pos >= len(p.data) {
			return "", p.syntax("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c == '\\':
			if err := p.escape(&b); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.syntax("unescaped control character in string")
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", fmt.Errorf("%w: at byte %d", ErrInvalidUTF8, p.pos)
			}
			b.Write(p.data[p.pos : p.pos+size])
			p.pos += size
		}
	}
}

func (p *jsonParser) escape(b *strings.Builder) error {
	at := p.pos
	if p.pos+1 >= len(p.data) {
		return p.syntax("unterminated escape")
	}
	c := p.data[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		b.WriteByte(c)
	case 'b':
		b.WriteByte('\b')
	case 'f':
		b.WriteByte('\f')
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return err
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00:
			// A high surrogate counts only with a low one right after it.
			if !bytes.HasPrefix(p.data[p.pos:], []byte(`\u`)) {
				return fmt.Errorf("%w: high surrogate \\u%04x at byte %d has no low surrogate", ErrLoneSurrogate, r, at)
			}
			p.pos += 2
			low, err := p.hex4()
			if err != nil {
				return err
			}
			if low < 0xdc00 || low > 0xdfff {
				return fmt.Errorf("%w: high surrogate \\u%04x at byte %d is followed by \\u%04x", ErrLoneSurrogate, r, at, low)
			}
			b.WriteRune(utf16.DecodeRune(r, low))
		case utf16.IsSurrogate(r):
			return fmt.Errorf("%w: low surrogate \\u%04x at byte %d", ErrLoneSurrogate, r, at)
		default:
			b.WriteRune(r)
		}
	default:
		return fmt.Errorf("%w: invalid escape \\%c at byte %d", ErrJSONSyntax, c, at)
	}
	return nil
}

func (p *jsonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.syntax("truncated \\u escape")
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		var d byte
		switch {
		case isDigit(c):
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.syntax("bad hex digit in \\u escape")
		}
		r = r<<4 | rune(d)
	}
	p.pos += 4
	return r, nil
}

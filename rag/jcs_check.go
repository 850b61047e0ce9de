package rag

import (
	"bytes"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// IsCanonical reports whether data is already its own RFC 8785 form:
// whether Canonical(data) would succeed and return data unchanged. It
// decides in one pass over the bytes, building no tree and copying no
// string, so a verifier can hold a large document (a bench report of ten
// thousand receipts) to its canonical form at the cost of a scan. Where it
// says false, Canonical says why.
//
// Each rule is Canonical's, read the other way: no whitespace; members
// strictly ascending by the UTF-16 code units of their unescaped keys
// (strictly, so no key twice); strings with exactly writeString's escapes
// and valid UTF-8; numbers that formatNumber prints as they stand; the
// three literals; nesting within MaxDepth; nothing after the value.
func IsCanonical(data []byte) bool {
	c := canonChecker{data: data}
	return c.value(0) && c.pos == len(data)
}

type canonChecker struct {
	data []byte
	pos  int
}

func (c *canonChecker) value(depth int) bool {
	if c.pos >= len(c.data) {
		return false
	}
	switch b := c.data[c.pos]; {
	case b == '{':
		return c.object(depth + 1)
	case b == '[':
		return c.array(depth + 1)
	case b == '"':
		_, _, ok := c.str()
		return ok
	case b == '-' || isDigit(b):
		return c.number()
	default:
		return c.literal("true") || c.literal("false") || c.literal("null")
	}
}

func (c *canonChecker) literal(word string) bool {
	if bytes.HasPrefix(c.data[c.pos:], []byte(word)) {
		c.pos += len(word)
		return true
	}
	return false
}

func (c *canonChecker) object(depth int) bool {
	if depth > MaxDepth {
		return false
	}
	c.pos++ // {
	if c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return true
	}
	var prev string
	for first := true; ; first = false {
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return false
		}
		key, ok := c.key()
		if !ok || !first && !keyLess(prev, key) {
			return false
		}
		prev = key
		if c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return false
		}
		c.pos++
		if !c.value(depth) || c.pos >= len(c.data) {
			return false
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return true
		default:
			return false
		}
	}
}

// key checks the member name at c.pos and returns it unescaped, as the
// parser would, for the order check.
func (c *canonChecker) key() (string, bool) {
	start := c.pos
	raw, escaped, ok := c.str()
	switch {
	case !ok:
		return "", false
	case !escaped:
		return string(raw), true
	}
	p := jsonParser{data: c.data, pos: start}
	k, err := p.string()
	return k, err == nil
}

// keyLess is RFC 8785 §3.2.3's order, as writeObject sorts: by UTF-16
// code units, which for ASCII keys is byte order.
func keyLess(a, b string) bool {
	if isASCII(a) && isASCII(b) {
		return a < b
	}
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b))) < 0
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func (c *canonChecker) array(depth int) bool {
	if depth > MaxDepth {
		return false
	}
	c.pos++ // [
	if c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return true
	}
	for {
		if !c.value(depth) || c.pos >= len(c.data) {
			return false
		}
		switch c.data[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return true
		default:
			return false
		}
	}
}

// str checks the string at c.pos is exactly what writeString writes for
// its content: every byte from 0x20 up but " and \ as itself, " and \ and
// the five named controls as their two-character escapes, the other
// controls as \u00xx in lowercase hex, and valid UTF-8. It returns the
// bytes between the quotes and whether any escape is among them.
func (c *canonChecker) str() (raw []byte, escaped, ok bool) {
	start := c.pos + 1
	ascii := true
	for i := start; i < len(c.data); i++ {
		switch b := c.data[i]; {
		case b == '"':
			c.pos = i + 1
			raw = c.data[start:i]
			return raw, escaped, ascii || utf8.Valid(raw)
		case b == '\\':
			n := canonEscape(c.data[i+1:])
			if n == 0 {
				return nil, false, false
			}
			escaped = true
			i += n
		case b < 0x20:
			return nil, false, false
		case b >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false, false
}

// canonEscape is the length, after the backslash, of the escape at the
// start of b when it is the one writeString writes for its character,
// else 0.
func canonEscape(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	switch b[0] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 1
	case 'u':
		// \u00xx, lowercase, for a control without a named escape.
		if len(b) < 5 || b[1] != '0' || b[2] != '0' || (b[3] != '0' && b[3] != '1') || !isLowerHexDigit(b[4]) {
			return 0
		}
		switch v := (b[3]-'0')<<4 | hexVal(b[4]); v {
		case '\b', '\f', '\n', '\r', '\t':
			return 0
		}
		return 5
	}
	return 0
}

func isLowerHexDigit(b byte) bool { return isDigit(b) || b >= 'a' && b <= 'f' }

func hexVal(b byte) byte {
	if isDigit(b) {
		return b - '0'
	}
	return b - 'a' + 10
}

// number checks the literal at c.pos is formatNumber's form of its
// value. An integer of at most 15 digits without a leading zero is: every
// such integer is an exact double, printed digit for digit.
func (c *canonChecker) number() bool {
	start := c.pos
	for c.pos < len(c.data) {
		b := c.data[c.pos]
		if !isDigit(b) && b != '-' && b != '+' && b != '.' && b != 'e' && b != 'E' {
			break
		}
		c.pos++
	}
	lit := c.data[start:c.pos]
	if plainInteger(lit) {
		return true
	}
	f, err := parseNumber(string(lit))
	return err == nil && formatNumber(f) == string(lit)
}

// plainInteger is -?[1-9][0-9]{0,14} or 0.
func plainInteger(lit []byte) bool {
	if len(lit) == 1 && lit[0] == '0' {
		return true
	}
	if len(lit) > 0 && lit[0] == '-' {
		lit = lit[1:]
	}
	if len(lit) == 0 || len(lit) > 15 || lit[0] == '0' {
		return false
	}
	for _, b := range lit {
		if !isDigit(b) {
			return false
		}
	}
	return true
}

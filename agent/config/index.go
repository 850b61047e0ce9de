package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// The decoder tells us what is wrong but not where a key lives once it has
// been turned into a struct field, so a second pass over go-toml's AST
// records, for every key path in the document, where its key is written.
// Semantic checks then point at the key they are about, and decode errors
// (which carry only a byte position) are mapped back to a key path with
// array-of-tables indices, which the decoder's own Key() lacks.

// entry is one key path seen in the document.
type entry struct {
	path       string        // e.g. "backend[1].meters[0]"
	off        int           // where the key (or an array element's value) starts
	start, end int           // byte span: the whole key = value, or the header key
	kind       unstable.Kind // the value's kind; Table/ArrayTable for tables
}

// expr is one top-level expression, the unit blanked out when the decoder
// refuses it so that decoding can go on and find the next problem.
type expr struct {
	start, end int
	header     bool
}

// index maps key paths to where they are written.
type index struct {
	data   []byte
	lines  []int // byte offset at which each line starts
	byPath map[string]*entry
	all    []*entry
	exprs  []expr
	arrays map[string]int // array-of-tables path -> elements seen so far
	// tables are the [table] headers seen, by path, as indices into exprs;
	// dups the headers that define one again.
	tables map[string]int
	dups   []dupTable
}

// dupTable is a [table] header defining a table a header already did.
type dupTable struct {
	path       string
	first, dup int // indices into exprs
}

// syntaxError is the parser's refusal with its byte offset.
type syntaxError struct {
	off int
	msg string
	key []string
}

// buildIndex parses data and indexes every key. A syntax error stops it:
// after one, the parser cannot say what the rest of the file means.
func buildIndex(data []byte) (ix *index, serr *syntaxError) {
	ix = &index{
		data:   data,
		byPath: map[string]*entry{},
		arrays: map[string]int{},
		tables: map[string]int{},
	}
	ix.lines = append(ix.lines, 0)
	for i, c := range data {
		if c == '\n' {
			ix.lines = append(ix.lines, i+1)
		}
	}
	defer func() {
		// The parser is not ours; a panic in it must become a problem, not
		// take down `meshd check-config`.
		if r := recover(); r != nil {
			serr = &syntaxError{off: -1, msg: fmt.Sprintf("cannot parse: %v", r)}
		}
	}()
	var p unstable.Parser
	p.Reset(data)
	var table string // resolved path of the current [table] or [[array]]
	for p.NextExpression() {
		n := p.Expression()
		switch n.Kind {
		case unstable.Table, unstable.ArrayTable:
			parts := keyParts(n)
			if len(parts) == 0 {
				continue
			}
			start := int(parts[0].Raw.Offset)
			for start > 0 && (data[start-1] == '[' || data[start-1] == ' ' || data[start-1] == '\t') {
				start--
			}
			ix.exprs = append(ix.exprs, expr{start: start, end: len(data), header: true})
			table = ix.addKey("", parts, n.Kind == unstable.ArrayTable, nil, n.Kind)
			if n.Kind == unstable.Table {
				x := len(ix.exprs) - 1
				if first, dup := ix.tables[table]; dup {
					ix.dups = append(ix.dups, dupTable{path: table, first: first, dup: x})
				} else {
					ix.tables[table] = x
				}
			}
		case unstable.KeyValue:
			r := n.Raw
			ix.exprs = append(ix.exprs, expr{start: int(r.Offset), end: int(r.Offset + r.Length)})
			ix.walkKeyValue(table, n)
		}
	}
	// A header's section runs to the next header: blanking a refused table
	// must take its keys with it, or they would land in the previous table.
	var last = -1
	for i := range ix.exprs {
		if ix.exprs[i].header {
			if last >= 0 {
				ix.exprs[last].end = ix.exprs[i].start
			}
			last = i
		}
	}
	if err := p.Error(); err != nil {
		se := &syntaxError{off: -1, msg: err.Error()}
		var perr *unstable.ParserError
		if errors.As(err, &perr) {
			se.msg = perr.Message
			se.key = perr.Key
			if off := cap(data) - cap(perr.Highlight); off >= 0 && off <= len(data) {
				se.off = off
			}
		}
		return ix, se
	}
	return ix, nil
}

// keyParts lists the Key nodes of a table header or key-value.
func keyParts(n *unstable.Node) []*unstable.Node {
	var parts []*unstable.Node
	it := n.Key()
	for it.Next() {
		parts = append(parts, it.Node())
	}
	return parts
}

// addKey records the dotted key parts under prefix and returns the resolved
// path. Parts naming an array of tables descend into its latest element, as
// TOML does; newElem appends an element (a [[header]]). The last part's span
// is whole when given, else the key's own bytes.
func (ix *index) addKey(prefix string, parts []*unstable.Node, newElem bool, whole *unstable.Range, kind unstable.Kind) string {
	path := prefix
	for i, k := range parts {
		path = joinKey(path, string(k.Data))
		last := i == len(parts)-1
		if last && newElem {
			n := ix.arrays[path]
			ix.arrays[path] = n + 1
			path = fmt.Sprintf("%s[%d]", path, n)
		} else if n, ok := ix.arrays[path]; ok && n > 0 {
			path = fmt.Sprintf("%s[%d]", path, n-1)
		}
		e := &entry{path: path, off: int(k.Raw.Offset), start: int(k.Raw.Offset), end: int(k.Raw.Offset + k.Raw.Length), kind: unstable.Table}
		if last {
			// The last part owns the whole dotted key (and its value), so
			// an error the decoder places at the key's start maps to it.
			e.kind = kind
			e.start = int(parts[0].Raw.Offset)
			if whole != nil {
				e.end = int(whole.Offset + whole.Length)
			}
		}
		ix.add(e)
	}
	return path
}

// add records e; the first definition of a path wins, since a redefinition
// is itself an error the decoder reports at its own position.
func (ix *index) add(e *entry) {
	ix.all = append(ix.all, e)
	if _, ok := ix.byPath[e.path]; !ok {
		ix.byPath[e.path] = e
	}
}

// walkKeyValue records a key = value under table, then the value's
// elements and inline-table keys.
func (ix *index) walkKeyValue(table string, n *unstable.Node) {
	v := n.Value()
	path := ix.addKey(table, keyParts(n), false, &n.Raw, v.Kind)
	ix.walkValue(path, v)
}

// walkValue records array elements (path[i]) and inline-table keys.
func (ix *index) walkValue(path string, v *unstable.Node) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		it := v.Children()
		for it.Next() {
			c := it.Node()
			if c.Kind == unstable.Comment {
				continue
			}
			p := fmt.Sprintf("%s[%d]", path, i)
			i++
			e := &entry{path: p, off: int(c.Raw.Offset), start: int(c.Raw.Offset), end: int(c.Raw.Offset + c.Raw.Length), kind: c.Kind}
			if c.Raw.Length == 0 {
				// Nested arrays carry no range of their own: point at the
				// parent's, and give them no span so errors map to
				// something more precise.
				if pe := ix.byPath[path]; pe != nil {
					e.off = pe.off
				}
				e.end = e.start
			}
			ix.add(e)
			ix.walkValue(p, c)
		}
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if c := it.Node(); c.Kind == unstable.KeyValue {
				ix.walkKeyValue(path, c)
			}
		}
	}
}

// joinKey appends one key part, quoting it when it is not a bare key so a
// path stays unambiguous.
func joinKey(prefix, part string) string {
	bare := part != ""
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			bare = false
			break
		}
	}
	if !bare {
		part = fmt.Sprintf("%q", part)
	}
	if prefix == "" {
		return part
	}
	return prefix + "." + part
}

// position converts a byte offset to a 1-based line and byte column; (0, 0)
// when the offset is unknown.
func (ix *index) position(off int) (line, col int) {
	if off < 0 || off > len(ix.data) {
		return 0, 0
	}
	i := sort.Search(len(ix.lines), func(i int) bool { return ix.lines[i] > off }) - 1
	return i + 1, off - ix.lines[i] + 1
}

// offset is the inverse of position, for the decoder's (line, column).
func (ix *index) offset(line, col int) int {
	if line < 1 || line > len(ix.lines) || col < 1 {
		return -1
	}
	off := ix.lines[line-1] + col - 1
	if off > len(ix.data) {
		return -1
	}
	return off
}

// pos is where path is written. A key that is absent (a missing required
// field) is reported at its nearest written ancestor, typically the
// [[backend]] header of the table that lacks it.
func (ix *index) pos(path string) (line, col int) {
	for p := path; p != ""; p = parentPath(p) {
		if e, ok := ix.byPath[p]; ok {
			return ix.position(e.off)
		}
	}
	return 0, 0
}

// has says whether path is written in the document.
func (ix *index) has(path string) bool {
	_, ok := ix.byPath[path]
	return ok
}

// kind is the TOML kind of the value at path, Invalid when absent.
func (ix *index) kind(path string) unstable.Kind {
	if e, ok := ix.byPath[path]; ok {
		return e.kind
	}
	return unstable.Invalid
}

// keyAt maps a decoder error's byte offset to the most specific key path
// whose span holds it. want is the decoder's own key (no indices): a path
// that matches it is preferred, since a header like [listen.extra] has both
// "listen" and "listen.extra" starting at the same place.
func (ix *index) keyAt(off int, want []string) string {
	var best *entry
	var bestMatch bool
	w := strings.Join(want, ".")
	for _, e := range ix.all {
		if off < e.start || off >= e.end {
			continue
		}
		match := w != "" && stripIndices(e.path) == w
		switch {
		case best == nil,
			match && !bestMatch,
			match == bestMatch && e.end-e.start < best.end-best.start:
			best, bestMatch = e, match
		}
	}
	if best != nil {
		return best.path
	}
	return w
}

// exprAt is the index of the top-level expression holding off, -1 if none.
// A key-value inside a table's section is preferred to the header.
func (ix *index) exprAt(off int) int {
	found := -1
	for i, x := range ix.exprs {
		if off >= x.start && off < x.end {
			if !x.header {
				return i
			}
			found = i
		}
	}
	return found
}

// parentPath drops the last part of a key path: "a.b[2]" -> "a.b",
// "a.b" -> "a". Quoted parts are not split.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	inQuote := false
	cut := -1
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '"':
			inQuote = !inQuote
		case '\\':
			if inQuote {
				i++
			}
		case '.':
			if !inQuote {
				cut = i
			}
		}
	}
	if cut < 0 {
		return ""
	}
	return p[:cut]
}

// stripIndices turns "meter[1].zone" into "meter.zone", the form of the
// decoder's keys.
func stripIndices(p string) string {
	var b strings.Builder
	depth := 0
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '[':
			depth++
		case c == ']':
			depth--
		case depth == 0:
			b.WriteByte(c)
		}
	}
	return b.String()
}

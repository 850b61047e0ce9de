package llamaserver

import (
	"net/http"
	"strconv"
	"strings"
)

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req struct {
		Content      string `json:"content"`
		AddSpecial   bool   `json:"add_special"`
		ParseSpecial *bool  `json:"parse_special"`
		WithPieces   bool   `json:"with_pieces"`
	}
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	tok := s.info.tok
	parse := req.ParseSpecial == nil || *req.ParseSpecial
	if !req.WithPieces {
		// The tokens go out as they are made: a large text's are never
		// all held, as ids or as JSON.
		tw := newTokenWriter(w)
		tok.EncodeFunc(req.Content, req.AddSpecial, parse, tw.add)
		tw.end()
		return
	}
	ids := tok.Encode(req.Content, req.AddSpecial, parse)
	type piece struct {
		ID    int `json:"id"`
		Piece any `json:"piece"`
	}
	pieces := make([]piece, len(ids))
	for i, id := range ids {
		p := tok.Piece(id)
		if s := string(p); strings.ToValidUTF8(s, "\uFFFD") == s {
			pieces[i] = piece{id, s}
		} else {
			pieces[i] = piece{id, p}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": pieces})
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	if !s.loaded(w) {
		return
	}
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if err := s.decode(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	var b []byte
	for _, id := range req.Tokens {
		b = append(b, s.info.tok.Piece(id)...)
	}
	writeJSON(w, http.StatusOK, map[string]string{"content": string(b)})
}

// tokenWriter answers {"tokens":[...]} as json.Encoder would (an empty
// array for no tokens), a buffer at a time.
type tokenWriter struct {
	w   http.ResponseWriter
	buf []byte
	n   int
	err error
}

func newTokenWriter(w http.ResponseWriter) *tokenWriter {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	return &tokenWriter{w: w, buf: append(make([]byte, 0, 32<<10), `{"tokens":[`...)}
}

func (tw *tokenWriter) add(ids []int) {
	for _, id := range ids {
		if tw.n > 0 {
			tw.buf = append(tw.buf, ',')
		}
		tw.n++
		tw.buf = strconv.AppendInt(tw.buf, int64(id), 10)
		if len(tw.buf) > 31<<10 {
			tw.flush()
		}
	}
}

func (tw *tokenWriter) flush() {
	if tw.err == nil {
		_, tw.err = tw.w.Write(tw.buf)
	}
	tw.buf = tw.buf[:0]
}

func (tw *tokenWriter) end() {
	tw.buf = append(tw.buf, "]}\n"...)
	tw.flush()
}

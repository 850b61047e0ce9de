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
	ids := tok.Encode(req.Content, req.AddSpecial, req.ParseSpecial == nil || *req.ParseSpecial)
	if ids == nil {
		// llama-server answers [] for empty content, never null.
		ids = []int{}
	}
	if !req.WithPieces {
		writeTokens(w, ids)
		return
	}
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

// writeTokens answers {"tokens":[...]} as json.Encoder would, a buffer at
// a time: a large text's tokens are never held a second time as JSON.
func writeTokens(w http.ResponseWriter, ids []int) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	buf := append(make([]byte, 0, 32<<10), `{"tokens":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
		if len(buf) > 31<<10 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}
	w.Write(append(buf, "]}\n"...))
}

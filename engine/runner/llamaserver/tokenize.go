package llamaserver

import (
	"net/http"
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
	if !req.WithPieces {
		writeJSON(w, http.StatusOK, map[string][]int{"tokens": ids})
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

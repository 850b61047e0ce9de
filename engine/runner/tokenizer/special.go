package tokenizer

import (
	"slices"
	"sort"
)

// specialSet finds tokens in raw text before it is tokenized, with the
// outcome of llama.cpp's tokenizer_st_partition: the tokens are taken
// longest first (ties in id order), and each takes its occurrences left
// to right that no longer token, or earlier occurrence, has covered.
//
// llama.cpp gets there by one pass of std::string::find over the text per
// token, which costs the text's length times the number of such tokens
// (thousands in Gemma's vocabulary). Here one pass finds every occurrence
// by looking up, at each byte, the substrings of the lengths that tokens
// starting with that byte have; occurrences that overlap (a cluster) are
// then settled in llama.cpp's order. Clusters that do not overlap cannot
// affect one another, so each is settled as soon as the scan leaves it.
type specialSet struct {
	ids  map[string]int
	lens [256][]int // distinct lengths of the tokens starting with each byte, longest first
	rank map[int]int
}

func newSpecialSet(tokens []string, types []int32, want func(int32) bool) *specialSet {
	s := &specialSet{ids: map[string]int{}, rank: map[int]int{}}
	var order []int
	for id, tok := range tokens {
		if tok == "" || !want(types[id]) {
			continue
		}
		s.ids[tok] = id
		order = append(order, id)
		if l := s.lens[tok[0]]; !slices.Contains(l, len(tok)) {
			s.lens[tok[0]] = append(l, len(tok))
		}
	}
	for b := range s.lens {
		sort.Sort(sort.Reverse(sort.IntSlice(s.lens[b])))
	}
	sort.SliceStable(order, func(a, b int) bool { return len(tokens[order[a]]) > len(tokens[order[b]]) })
	for r, id := range order {
		s.rank[id] = r
	}
	return s
}

type occurrence struct{ pos, len, id int }

// partition calls emit, in text order, with each run of raw text (id −1)
// and each token found (its id, text "").
func (s *specialSet) partition(text string, emit func(frag string, id int)) {
	if len(s.ids) == 0 {
		if text != "" {
			emit(text, -1)
		}
		return
	}
	var cluster, taken []occurrence
	var covered []bool
	clusterEnd, done := 0, 0 // end of the cluster; text before done is emitted
	settle := func() {
		if len(cluster) == 0 {
			return
		}
		sort.SliceStable(cluster, func(a, b int) bool {
			ra, rb := s.rank[cluster[a].id], s.rank[cluster[b].id]
			if ra != rb {
				return ra < rb
			}
			return cluster[a].pos < cluster[b].pos
		})
		// covered marks the cluster's bytes already taken by a token.
		base := cluster[0].pos
		for _, o := range cluster {
			base = min(base, o.pos)
		}
		covered = append(covered[:0], make([]bool, clusterEnd-base)...)
		taken = taken[:0]
		for _, o := range cluster {
			if slices.Contains(covered[o.pos-base:o.pos-base+o.len], true) {
				continue
			}
			for j := o.pos - base; j < o.pos-base+o.len; j++ {
				covered[j] = true
			}
			taken = append(taken, o)
		}
		sort.Slice(taken, func(a, b int) bool { return taken[a].pos < taken[b].pos })
		for _, o := range taken {
			if done < o.pos {
				emit(text[done:o.pos], -1)
			}
			emit("", o.id)
			done = o.pos + o.len
		}
		cluster = cluster[:0]
	}
	for i := 0; i < len(text); i++ {
		if i >= clusterEnd {
			settle()
		}
		for _, n := range s.lens[text[i]] {
			if i+n > len(text) {
				continue
			}
			if id, ok := s.ids[text[i:i+n]]; ok {
				cluster = append(cluster, occurrence{i, n, id})
				clusterEnd = max(clusterEnd, i+n)
			}
		}
	}
	settle()
	if done < len(text) {
		emit(text[done:], -1)
	}
}

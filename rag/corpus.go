package rag

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Repo is one repository of a corpus, as describe_corpus lists it. Only these
// four fields are covered by the corpus hash; any other key a provider puts in
// a repo is dropped by ParseDescription, since nothing vouches for it.
type Repo struct {
	// ID names the repo within the corpus; corpus provenance paths start with it.
	ID string
	// URL is where the repo is fetched from.
	URL string
	// Branch is the branch the pin follows.
	Branch string
	// Commit is the pinned commit, 40 lowercase hex digits.
	Commit string
}

// Description is a describe_corpus reply: the corpus identity (Model, Dim,
// Repos), the hash the provider claims for it, and the operator's optional
// signature.
type Description struct {
	// Model names the embedding, e.g. "macula/multilingual-e5-small:f16".
	Model string
	// Dim is the embedding's dimension; a query_vector of another length is
	// refused by the provider.
	Dim int
	// Repos are the corpus's repos in the provider's list order, which the
	// hash keeps.
	Repos []Repo
	// CorpusHash is the hash the provider claims, as received.
	CorpusHash string
	// Signature is the encoded macula signed object, or nil when the
	// description carries none. A present but empty signature is non-nil.
	Signature []byte
	// SignedBy is the hex node id the provider names as signer. It is a
	// display label and never evidence: VerifyCorpus does not read it.
	SignedBy string
	// Extra holds every other text key of the description. None of it is
	// vouched for by the hash or the signature, and it must never be shown
	// as if it were.
	Extra map[string]any
}

// CorpusHash is the contract's corpus hash: the lowercase hex SHA-256 of the
// RFC 8785 canonical JSON of {"dim", "model", "repos": [{"branch", "commit",
// "id", "url"}, ...]} with the repos in list order. Model and dim are in it
// because the same repos embedded differently are a different corpus. An
// empty repo list still hashes ("repos": []).
//
// It returns "" when the identity has no canonical JSON: a string that is not
// valid UTF-8, or a dim past ±2^53. Description validation refuses both first.
func CorpusHash(model string, dim int, repos []Repo) string {
	canonical, err := corpusIdentityJSON(model, dim, repos)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

// corpusIdentityJSON is the canonical JSON the corpus hash is taken over.
func corpusIdentityJSON(model string, dim int, repos []Repo) ([]byte, error) {
	list := make([]any, len(repos)) // never nil: an empty corpus is "repos":[]
	for i, r := range repos {
		list[i] = map[string]any{"branch": r.Branch, "commit": r.Commit, "id": r.ID, "url": r.URL}
	}
	return CanonicalValue(map[string]any{"dim": int64(dim), "model": model, "repos": list})
}

// Hash is the corpus hash of d's identity, recomputed; compare it with
// d.CorpusHash.
func (d Description) Hash() string { return CorpusHash(d.Model, d.Dim, d.Repos) }

// Validate checks that d holds exactly what the hash covers, well typed: a
// non-empty model, a dim from 1 to 2^53, and repos whose id, url and branch
// are non-empty and whose commit is 40 lowercase hex digits. Every string must
// be valid UTF-8, since the hash is taken over canonical JSON. It returns a
// *Refusal with the reason malformed_description.
func (d Description) Validate() error {
	if d.Model == "" {
		return malformedDescription("model is empty")
	}
	if !utf8.ValidString(d.Model) {
		return malformedDescription("model is not valid UTF-8")
	}
	if d.Dim <= 0 || int64(d.Dim) > maxExactInteger {
		return malformedDescription("dim %d is not from 1 to 2^53", d.Dim)
	}
	for i, r := range d.Repos {
		for _, f := range []struct{ name, value string }{{"id", r.ID}, {"url", r.URL}, {"branch", r.Branch}} {
			if f.value == "" {
				return malformedDescription("repo %d: %s is empty", i, f.name)
			}
			if !utf8.ValidString(f.value) {
				return malformedDescription("repo %d: %s is not valid UTF-8", i, f.name)
			}
		}
		if !isLowerHex(r.Commit, 40) {
			return malformedDescription("repo %d: commit %q is not 40 lowercase hex digits", i, r.Commit)
		}
	}
	return nil
}

// ParseDescription reads a describe_corpus reply, either as JSON (an object;
// signature, when present, a standard padded base64 string) or as its CBOR
// wire form (a map with text keys; every string a text string, dim an
// unsigned integer, signature a byte string, under macula's decoding rule).
// The two cannot be confused: JSON starts with '{', which in CBOR begins a
// text string, never a map.
//
// Keys other than those named in Description go to Extra (non-text CBOR keys
// are dropped); extra keys inside a repo are dropped. Anything else wrong is a
// *Refusal with the reason malformed_description.
func ParseDescription(data []byte) (Description, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		v, err := parseJSON(data)
		if err != nil {
			return Description{}, malformedDescription("JSON: %w", err)
		}
		m, _ := v.(map[string]any) // '{' guarantees an object
		return descriptionFrom(m, jsonForm)
	}
	v, err := decodeStrict(data)
	if err != nil {
		return Description{}, malformedDescription("CBOR: %w", err)
	}
	raw, ok := v.(map[any]any)
	if !ok {
		return Description{}, malformedDescription("CBOR: not a map")
	}
	return descriptionFrom(textKeys(raw), cborForm)
}

type wireForm int

const (
	jsonForm wireForm = iota
	cborForm
)

// textKeys keeps the text-keyed members of a decoded CBOR map.
func textKeys(raw map[any]any) map[string]any {
	m := make(map[string]any, len(raw))
	for k, v := range raw {
		if s, ok := k.(string); ok {
			m[s] = v
		}
	}
	return m
}

func descriptionFrom(m map[string]any, form wireForm) (Description, error) {
	var d Description
	var ok bool
	if d.Model, ok = m["model"].(string); !ok {
		return Description{}, malformedDescription("model is missing or not a string")
	}
	dim, err := integerField(m["dim"], form)
	if err != nil {
		return Description{}, malformedDescription("dim: %w", err)
	}
	d.Dim = dim
	if d.CorpusHash, ok = m["corpus_hash"].(string); !ok {
		return Description{}, malformedDescription("corpus_hash is missing or not a string")
	}
	rawRepos, ok := m["repos"].([]any)
	if !ok {
		return Description{}, malformedDescription("repos is missing or not a list")
	}
	d.Repos = make([]Repo, len(rawRepos))
	for i, rr := range rawRepos {
		r, err := repoFrom(rr, form)
		if err != nil {
			return Description{}, malformedDescription("repo %d: %w", i, err)
		}
		d.Repos[i] = r
	}
	if sig, present := m["signature"]; present {
		if d.Signature, err = signatureField(sig, form); err != nil {
			return Description{}, malformedDescription("signature: %w", err)
		}
	}
	for k, v := range m {
		switch k {
		case "model", "dim", "corpus_hash", "repos", "signature":
			continue
		case "signed_by":
			if s, isString := v.(string); isString {
				d.SignedBy = s
				continue
			}
		}
		if d.Extra == nil {
			d.Extra = map[string]any{}
		}
		d.Extra[k] = v
	}
	if err := d.Validate(); err != nil {
		return Description{}, err
	}
	return d, nil
}

func repoFrom(v any, form wireForm) (Repo, error) {
	var m map[string]any
	switch x := v.(type) {
	case map[string]any:
		m = x
	case map[any]any:
		if form == cborForm {
			m = textKeys(x)
		}
	}
	if m == nil {
		return Repo{}, fmt.Errorf("not a map")
	}
	var r Repo
	for _, f := range []struct {
		name string
		dst  *string
	}{{"id", &r.ID}, {"url", &r.URL}, {"branch", &r.Branch}, {"commit", &r.Commit}} {
		s, ok := m[f.name].(string)
		if !ok {
			return Repo{}, fmt.Errorf("%s is missing or not a string", f.name)
		}
		*f.dst = s
	}
	return r, nil
}

// integerField reads dim: in JSON an integer literal (no fraction or
// exponent, as Erlang's json decoder would otherwise give a float), in CBOR
// an unsigned integer.
func integerField(v any, form wireForm) (int, error) {
	switch x := v.(type) {
	case json.Number:
		if form != jsonForm {
			break
		}
		n, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil || n > maxExactInteger || n < -maxExactInteger {
			return 0, fmt.Errorf("%s is not an integer from -2^53 to 2^53", x)
		}
		// On a 32-bit platform int is narrower than 2^53: refuse rather
		// than truncate.
		if n > math.MaxInt || n < math.MinInt {
			return 0, fmt.Errorf("%s is past this platform's int", x)
		}
		return int(n), nil
	case uint64:
		if x > maxExactInteger {
			return 0, fmt.Errorf("%d is past 2^53", x)
		}
		if x > math.MaxInt {
			return 0, fmt.Errorf("%d is past this platform's int", x)
		}
		return int(x), nil
	case int64:
		if x > math.MaxInt || x < math.MinInt {
			return 0, fmt.Errorf("%d is past this platform's int", x)
		}
		return int(x), nil // negative: Validate refuses it
	}
	return 0, fmt.Errorf("missing or not an integer")
}

// signatureField reads the signature: bytes in CBOR, standard padded base64
// in JSON, which has no byte strings.
func signatureField(v any, form wireForm) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		if form == cborForm {
			return x, nil
		}
	case string:
		if form == jsonForm {
			b, err := base64.StdEncoding.Strict().DecodeString(x)
			if err != nil {
				return nil, fmt.Errorf("not base64: %w", err)
			}
			return b, nil
		}
	}
	if form == cborForm {
		return nil, fmt.Errorf("not a byte string")
	}
	return nil, fmt.Errorf("not a base64 string")
}

// isLowerHex reports whether s is exactly n lowercase hex digits.
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isDigit(c) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

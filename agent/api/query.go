package api

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// query returns r's query parameters after refusing, with a 400 naming the
// parameter, a malformed query, a parameter the route does not take (a
// misspelt one would otherwise be ignored, and the answer mistaken for the
// one asked for) and a parameter given twice. allowed lists what the route
// takes; none means it takes no parameters.
func query(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Message: fmt.Sprintf("query: malformed: %v", err), Code: "invalid_field"})
		return nil, false
	}
	for name, vs := range q {
		if !slices.Contains(allowed, name) {
			takes := "takes no query parameters"
			if len(allowed) > 0 {
				takes = "takes " + strings.Join(allowed, ", ")
			}
			badField(w, name, fmt.Sprintf("unknown query parameter: %s %s", r.URL.Path, takes))
			return nil, false
		}
		if len(vs) > 1 {
			badField(w, name, fmt.Sprintf("given %d times, want once", len(vs)))
			return nil, false
		}
	}
	return q, true
}

// uintParam reads the optional parameter name of q as a decimal integer
// in [lo, hi]. It returns def when the parameter is absent, and false after
// answering 400 when it is not such an integer: negative, signed, not an
// integer, or out of range.
func uintParam(w http.ResponseWriter, q url.Values, name string, lo, hi, def uint64) (uint64, bool) {
	s, ok := q[name]
	if !ok {
		return def, true
	}
	want := fmt.Sprintf("want an integer %d..%d", lo, hi)
	if hi == math.MaxUint64-1 {
		want = fmt.Sprintf("want an integer from %d (at most 2^64-2)", lo)
	}
	v, err := strconv.ParseUint(s[0], 10, 64)
	if err != nil || v < lo || v > hi || s[0] == "" || s[0][0] == '+' {
		badField(w, name, fmt.Sprintf("%q: %s", s[0], want))
		return 0, false
	}
	return v, true
}

package config

import (
	"fmt"
	"net/url"
	"strings"
)

// cors checks [listen] cors_origins: each an origin as a browser sends it
// in the Origin header — scheme://host[:port], http or https, no path,
// query or trailing slash — or "*" alone for any origin. A browser
// compares origins byte for byte, so one written any other way would
// never match and the page would fail with no hint why.
func (v *checker) cors() {
	origins := v.c.Listen.CORSOrigins
	for i, o := range origins {
		key := fmt.Sprintf("listen.cors_origins[%d]", i)
		if o == "*" {
			if len(origins) > 1 {
				v.problem(key, `"*" allows every origin: list it alone or not at all`)
			}
			continue
		}
		u, err := url.Parse(o)
		switch {
		case err != nil:
			v.problem(key, "%q is not an origin: %v", o, err)
		case u.Scheme != "http" && u.Scheme != "https":
			v.problem(key, "%q: an origin is http:// or https:// and a host, e.g. https://dash.example.org", o)
		case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
			v.problem(key, "%q: an origin is only scheme://host[:port], without a path, query or credentials", o)
		case strings.HasSuffix(o, "/") || o != strings.ToLower(o):
			v.problem(key, "%q: write it as browsers send it, lower case without a trailing slash (%q)", o, strings.ToLower(strings.TrimSuffix(o, "/")))
		}
	}
}

package config

import "fmt"

// aliases checks each [[backend]]'s aliases: model ids that pin an
// OpenAI-shaped serve, so each must name one backend only — never another
// backend's name nor an alias given twice.
func (v *checker) aliases() {
	names := map[string]bool{}
	for _, b := range v.c.Backends {
		names[b.Name] = true
	}
	seen := map[string]string{}
	for i, b := range v.c.Backends {
		for k, a := range b.Aliases {
			key := fmt.Sprintf("backend[%d].aliases", i)
			switch {
			case a == "":
				v.problem(key, "alias %d is empty", k)
			case names[a] && a != b.Name:
				v.problem(key, "%q is another backend's name: it would pin two backends", a)
			case a == b.Name:
				v.problem(key, "%q is this backend's own name, which pins it already", a)
			case seen[a] != "":
				v.problem(key, "%q is already an alias of backend %q", a, seen[a])
			default:
				seen[a] = b.Name
			}
		}
	}
}

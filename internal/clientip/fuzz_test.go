package clientip

import "testing"

// FuzzForwardedFor: the Forwarded parser never panics, and an element it
// returns is never longer than the line it came from.
func FuzzForwardedFor(f *testing.F) {
	for _, s := range []string{
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		`for="[2001:db8:cafe::17]:4711"`,
		`for=192.0.2.43, for="[2001:db8:cafe::17]", for=unknown`,
		`For="\"[2001:db8::1]\""`,
		`for="`,
		`;;, ,for=10.0.0.1;`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		nodes, _ := forwardedFor(line)
		for _, n := range nodes {
			if len(n) > len(line) {
				t.Fatalf("element %q longer than line %q", n, line)
			}
		}
	})
}

package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/internal/clientip"
)

var fuzzTrusted = []string{"10.0.0.0/8", "2001:db8:ffff::/48"}

// checkKey fails t unless key is an IPv4 address or an IPv6 /64, in the
// form ClientIP writes them.
func checkKey(t *testing.T, key string) {
	t.Helper()
	s, ok := strings.CutPrefix(key, "ip:")
	if !ok {
		t.Fatalf("key %q does not start with ip:", key)
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() && a.String() == s {
		return
	}
	if p, err := netip.ParsePrefix(s); err == nil && p.Bits() == 64 && p.Addr().Is6() && p == p.Masked() && p.String() == s {
		return
	}
	t.Fatalf("key %q is neither an IPv4 address nor an IPv6 /64", key)
}

// FuzzClientIP: ClientIP never panics, always returns a well-formed key or
// an error, ignores the forwarding headers of untrusted peers entirely,
// never reads any header but X-Forwarded-For, and behind a trusted proxy
// keys on what the proxy appended, whatever the client wrote before it.
func FuzzClientIP(f *testing.F) {
	f.Add("203.0.113.7:1", "198.51.100.1", "198.51.100.2", "for=198.51.100.3")
	f.Add("10.0.0.1:1", "1.1.1.1, 198.51.100.1", "", `for="[2001:db8::1]:80"`)
	f.Add("[::ffff:10.0.0.1]:1", "unknown", "_x", "for=unknown")
	f.Add("[2001:db8:ffff::1]:1", ",,", " ", `for="`)
	f.Add("[fe80::1%eth0]:80", "::ffff:1.2.3.4", "[::1]", "for=_hidden")
	f.Add("10.0.0.1", "10.0.0.2, 10.0.0.3", "10.0.0.4", "for=10.0.0.5")
	f.Add("garbage", "[1.2.3.4]:99999", "1.2.3.4:", "proto=https")
	key := ClientIP(fuzzTrusted...)
	trusts := func(remote string) bool {
		peer, err := clientip.ParseNode(remote)
		if err != nil {
			return false
		}
		for _, p := range fuzzTrusted {
			if netip.MustParsePrefix(p).Contains(peer) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, remote, xff, realIP, fwd string) {
		header := http.Header{"X-Forwarded-For": {xff}, "X-Real-Ip": {realIP}, "Forwarded": {fwd}}
		got, err := key(request(remote, header))
		if err == nil {
			checkKey(t, got)
		}
		if only, onlyErr := key(request(remote, http.Header{"X-Forwarded-For": {xff}})); got != only || (err == nil) != (onlyErr == nil) {
			t.Fatalf("peer %q: key %q, %v with X-Real-IP and Forwarded; %q, %v without", remote, got, err, only, onlyErr)
		}
		if !trusts(remote) {
			bare, bareErr := key(request(remote, nil))
			if got != bare || (err == nil) != (bareErr == nil) {
				t.Fatalf("untrusted peer %q: key %q, %v with headers; %q, %v without", remote, got, err, bare, bareErr)
			}
			return
		}
		for _, lines := range [][]string{{xff, "198.51.100.7"}, {xff + ", 198.51.100.7"}} {
			header["X-Forwarded-For"] = lines
			if got, err := key(request(remote, header)); err != nil || got != "ip:198.51.100.7" {
				t.Fatalf("X-Forwarded-For %q from a trusted proxy: key %q, %v; want ip:198.51.100.7", lines, got, err)
			}
		}
	})
}

// FuzzForwarded: the Forwarded parser never panics; what a client writes
// in the header can neither change the key of an untrusted peer, nor the
// client a trusted proxy appends on a line of its own; on the same line, it
// can at worst make the header unreadable.
func FuzzForwarded(f *testing.F) {
	for _, s := range []string{
		"for=192.0.2.60;proto=http;by=203.0.113.43",
		`for="[2001:db8:cafe::17]:4711"`,
		`for=192.0.2.43, for="[2001:db8:cafe::17]", for=unknown`,
		`for="_gazonk"`,
		`For="\"[2001:db8::1]\""`,
		`for=`,
		`for="`,
		`;;, ,for=10.0.0.1;`,
		`a=b;for=1.2.3.4:80;for=5.6.7.8`,
	} {
		f.Add(s)
	}
	key, err := NewClientIP(ClientIPConfig{TrustedProxies: []string{"10.0.0.0/8"}, Header: "Forwarded"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if got, err := key(request("10.0.0.1:1", http.Header{"Forwarded": {line}})); err == nil {
			checkKey(t, got)
		}
		if got, err := key(request("203.0.113.7:1", http.Header{"Forwarded": {line}})); err != nil || got != "ip:203.0.113.7" {
			t.Fatalf("untrusted peer: key %q, %v", got, err)
		}
		if got, err := key(request("10.0.0.1:1", http.Header{"Forwarded": {line, "for=198.51.100.7"}})); err != nil || got != "ip:198.51.100.7" {
			t.Fatalf("the proxy's own line: key %q, %v; want ip:198.51.100.7", got, err)
		}
		if got, err := key(request("10.0.0.1:1", http.Header{"Forwarded": {line + ", for=198.51.100.7"}})); err == nil && got != "ip:198.51.100.7" {
			t.Fatalf("appended on the same line: key %q; want ip:198.51.100.7 or an error", got)
		}
	})
}

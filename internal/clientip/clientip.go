// Package clientip finds the client of a request from its peer's address
// and the forwarding header its trusted proxies wrote, for httplimit's
// ClientIP and grpclimit's, so that both read them one way: from right to
// left, never trusting what the client wrote.
package clientip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the length of the prefix that IPv6 clients are keyed
// on: one /64 is one subscriber's network, with 2^64 addresses to rotate
// through.
const DefaultIPv6Prefix = 64

// A Resolver keys requests on their client's address. It is safe for
// concurrent use.
type Resolver struct {
	trusted []netip.Prefix
	bits    int  // of IPv6 keys
	rfc7239 bool // the forwarding header is Forwarded
}

// New returns a Resolver that trusts the proxies trusted (CIDRs or single
// addresses), keys IPv6 clients on their /ipv6Prefix (0 means
// DefaultIPv6Prefix), and parses the forwarding header as RFC 7239's
// Forwarded if rfc7239, else as a comma-separated list of addresses (as
// X-Forwarded-For). Its errors name the input at fault, without a package
// prefix.
func New(trusted []string, ipv6Prefix int, rfc7239 bool) (*Resolver, error) {
	r := &Resolver{bits: DefaultIPv6Prefix, rfc7239: rfc7239}
	if ipv6Prefix != 0 {
		if ipv6Prefix < 1 || ipv6Prefix > 128 {
			return nil, fmt.Errorf("IPv6 prefix length %d is not between 1 and 128", ipv6Prefix)
		}
		r.bits = ipv6Prefix
	}
	for _, s := range trusted {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, err
		}
		r.trusted = append(r.trusted, p)
	}
	return r, nil
}

// Client returns the client of a request from peer: peer itself unless
// it is a trusted proxy; then the forwarding header's lines, which lines
// returns (called only then), are walked from right to left, trusted
// proxies skipped, and the first address that is not one is the client.
// If every entry is trusted, the leftmost is the client; without entries,
// the peer is. An entry that is not an address where the client should
// be is an error.
func (r *Resolver) Client(peer netip.Addr, lines func() []string) (netip.Addr, error) {
	if !r.trusts(peer) {
		return peer, nil
	}
	w := walk{trusts: r.trusts}
	var err error
	if r.rfc7239 {
		err = w.forwarded(lines())
	} else {
		err = w.list(lines())
	}
	if err != nil {
		return netip.Addr{}, err
	}
	if !w.addr.IsValid() {
		return peer, nil
	}
	return w.addr, nil
}

// Key is the rate limit key of client a: "ip:203.0.113.7", or for IPv6
// its prefix, "ip:2001:db8:1:2::/64".
func (r *Resolver) Key(a netip.Addr) string {
	if a.Is6() && r.bits < 128 {
		p, _ := a.Prefix(r.bits) // cannot fail: 1 <= bits < 128
		return "ip:" + p.String()
	}
	return "ip:" + a.String()
}

func (r *Resolver) trusts(a netip.Addr) bool {
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func parseTrusted(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("trusted proxy %q is not a CIDR: %w", s, err)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("trusted proxy %q is not an IP address: %w", s, err)
		}
		a = a.WithZone("")
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	if a := p.Addr(); a.Is6() && p.Bits() >= 96 {
		// Peers are unwrapped before they are compared.
		if u := unwrap(a); u.Is4() {
			p = netip.PrefixFrom(u, p.Bits()-96)
		}
	}
	return p, nil
}

// ParseNode parses a client address as RemoteAddr and the forwarding
// headers write it: an IP address, with or without a port
// ("192.0.2.1:443", "[2001:db8::1]:443", "2001:db8::1", "[2001:db8::1]").
// It drops zones and unwraps IPv4 addresses embedded in IPv6 ones, so
// that one client has one form.
func ParseNode(s string) (netip.Addr, error) {
	host, port, hasPort := s, "", false
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" {
			if rest[0] != ':' {
				return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
			}
			port, hasPort = rest[1:], true
		}
	} else if strings.Count(s, ":") == 1 { // IPv4 with a port; IPv6 has more colons
		host, port, hasPort = strings.Cut(s, ":")
	}
	switch {
	case host == "":
		return netip.Addr{}, errors.New("no client address")
	case strings.EqualFold(host, "unknown"):
		return netip.Addr{}, errors.New(`the client address is "unknown"`)
	case host[0] == '_':
		return netip.Addr{}, fmt.Errorf("the client address %q is obfuscated", host)
	case hasPort && !validPort(port):
		return netip.Addr{}, fmt.Errorf("%q has an invalid port", s)
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	return unwrap(a.WithZone("")), nil
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052's well-known prefix
	compat = netip.MustParsePrefix("::/96")        // IPv4-compatible, RFC 4291
)

// unwrap returns the IPv4 address that an IPv6 address without a zone
// carries, if it is IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::a.b.c.d)
// or IPv4-compatible (::a.b.c.d, but not :: or ::1), and a otherwise.
// Keyed on their /64, all the IPv4 clients seen in one of these forms
// would share one bucket.
func unwrap(a netip.Addr) netip.Addr {
	switch {
	case a.Is4In6():
		return a.Unmap()
	case nat64.Contains(a), compat.Contains(a) && !a.IsUnspecified() && !a.IsLoopback():
		b := a.As16()
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return a
}

// validPort accepts a port number, or an obfuscated port of RFC 7239
// ("_" followed by letters, digits, ".", "_" or "-").
func validPort(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '_' {
		return len(p) > 1 && strings.Trim(p[1:], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
	}
	return len(p) <= 5 && strings.Trim(p, "0123456789") == ""
}

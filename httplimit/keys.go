package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// A KeyFunc returns the rate limit key of a request: requests with the same
// key draw from the same bucket. An error means the request cannot be
// keyed; Middleware answers it with its ErrorHandler (400 by default) and
// never limits it under some shared key.
type KeyFunc func(*http.Request) (string, error)

// HeaderKey returns a KeyFunc that keys requests on the value of the header
// name, such as an API key or a user ID set by an authenticating proxy:
// HeaderKey("X-API-Key") keys on "x-api-key:<value>". A request without
// the header, or with an empty one, cannot be keyed.
//
// Clients choose their headers: limit on a header only behind
// authentication, or a client evades the limit by inventing values. The
// value appears as it is in the store's keys; if it is a secret, key on
// what it authenticates instead.
func HeaderKey(name string) KeyFunc {
	name = textproto.CanonicalMIMEHeaderKey(name)
	prefix := strings.ToLower(name) + ":"
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("httplimit: the request has no %s header", name)
		}
		return prefix + v, nil
	}
}

// DefaultIPv6Prefix is the length of the prefix that IPv6 clients are keyed
// on: one /64 is one subscriber's network, with 2^64 addresses to rotate
// through.
const DefaultIPv6Prefix = 64

// ClientIPConfig configures NewClientIP.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs ("10.0.0.0/8", "2001:db8::/32") or
	// single addresses of the proxies in front of the server. A request's
	// forwarding header is read only when its peer is one of them.
	TrustedProxies []string
	// Header is the one forwarding header that the trusted proxies write
	// the client's address in: X-Forwarded-For if empty. No other header
	// is ever read, since a proxy passes on the headers it does not set
	// with whatever address a client wrote in them. Forwarded is parsed as
	// RFC 7239; any other header (X-Real-IP, CF-Connecting-IP...) as a
	// comma-separated list of addresses, like X-Forwarded-For.
	Header string
	// IPv6Prefix is the length of the prefix that IPv6 clients are keyed on,
	// 1 to 128; 0 means DefaultIPv6Prefix.
	IPv6Prefix int
}

// ClientIP returns a KeyFunc that keys requests on the client's IP
// address, "ip:203.0.113.7", with IPv6 clients keyed on their /64,
// "ip:2001:db8:1:2::/64". IPv6 addresses that embed an IPv4 one
// (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d, IPv4-compatible
// ::a.b.c.d) are keyed as the IPv4 addresses they carry.
//
// The client is the peer (Request.RemoteAddr) unless the peer is one of
// trustedProxies (CIDRs, or single addresses). Then X-Forwarded-For, and
// no other header, is read from right to left, as the proxies appended to
// it: trusted proxies are skipped, and the first address that is not one
// is the client. Entries further left were written by the client and are
// ignored. If every entry is a trusted proxy, the leftmost is the client;
// without the header, the peer is. An entry that is not an IP address
// (such as "unknown") where the client should be is an error, since any
// address left of it could be forged.
//
// Use ClientIP only behind proxies that append the client to
// X-Forwarded-For. A proxy that writes another header instead (X-Real-IP,
// Forwarded, CF-Connecting-IP) passes on the X-Forwarded-For that the
// client wrote: name its header in NewClientIP's ClientIPConfig.Header.
//
// Without trustedProxies, every client behind a proxy shares the proxy's
// bucket. ClientIP panics if an element of trustedProxies is neither a
// CIDR nor an address: with addresses from configuration, use NewClientIP,
// which returns the error.
func ClientIP(trustedProxies ...string) KeyFunc {
	f, err := NewClientIP(ClientIPConfig{TrustedProxies: trustedProxies})
	if err != nil {
		panic(err)
	}
	return f
}

// NewClientIP returns a KeyFunc like ClientIP's, configured by cfg, or an
// error if cfg is invalid.
func NewClientIP(cfg ClientIPConfig) (KeyFunc, error) {
	c := &clientIP{bits: DefaultIPv6Prefix, header: "X-Forwarded-For"}
	if cfg.IPv6Prefix != 0 {
		if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
			return nil, fmt.Errorf("httplimit: IPv6 prefix length %d is not between 1 and 128", cfg.IPv6Prefix)
		}
		c.bits = cfg.IPv6Prefix
	}
	for _, s := range cfg.TrustedProxies {
		p, err := parseTrusted(s)
		if err != nil {
			return nil, err
		}
		c.trusted = append(c.trusted, p)
	}
	if cfg.Header != "" {
		for i := 0; i < len(cfg.Header); i++ {
			if !isTchar(cfg.Header[i]) {
				return nil, fmt.Errorf("httplimit: forwarding header %q is not a header name", cfg.Header)
			}
		}
		c.header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	}
	return c.key, nil
}

func parseTrusted(s string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return p, fmt.Errorf("httplimit: trusted proxy %q is not a CIDR: %w", s, err)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return p, fmt.Errorf("httplimit: trusted proxy %q is not an IP address: %w", s, err)
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

type clientIP struct {
	trusted []netip.Prefix
	header  string // canonical
	bits    int    // of IPv6 keys
}

func (c *clientIP) key(r *http.Request) (string, error) {
	addr, err := parseNode(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("httplimit: peer address (RemoteAddr) %q: %w", r.RemoteAddr, err)
	}
	if c.trusts(addr) {
		if addr, err = c.forwarded(r.Header, addr); err != nil {
			return "", err
		}
	}
	if addr.Is6() && c.bits < 128 {
		p, _ := addr.Prefix(c.bits) // cannot fail: 1 <= bits < 128
		return "ip:" + p.String(), nil
	}
	return "ip:" + addr.String(), nil
}

func (c *clientIP) trusts(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwarded returns the client that a trusted peer forwarded the request
// for, or the peer itself if it forwarded nothing.
func (c *clientIP) forwarded(h http.Header, peer netip.Addr) (netip.Addr, error) {
	w := walk{trusts: c.trusts}
	var err error
	if c.header == "Forwarded" {
		err = w.forwarded(h[c.header])
	} else {
		err = w.list(h[c.header])
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("httplimit: %s: %w", c.header, err)
	}
	if !w.addr.IsValid() {
		return peer, nil
	}
	return w.addr, nil
}

// parseNode parses a client address as RemoteAddr and the forwarding
// headers write it: an IP address, with or without a port
// ("192.0.2.1:443", "[2001:db8::1]:443", "2001:db8::1", "[2001:db8::1]").
// It drops zones and unwraps IPv4 addresses embedded in IPv6 ones, so
// that one client has one form.
func parseNode(s string) (netip.Addr, error) {
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

// PerRoute returns a KeyFunc that keys each request on key's key and the
// route that serves it, so that every route of a client has a limit of
// its own: "<pattern> <key>", as in "GET /items/{id} ip:192.0.2.1". The
// route is the ServeMux pattern that matched the request
// (Request.Pattern) when the middleware wraps a handler registered on the
// mux; when it wraps the whole mux, mux says which pattern will match
// (ServeMux.Handler). Keying on the pattern rather than the path keeps a
// client from minting limits of its own with /items/1, /items/2, ...; all
// requests that no pattern matches share one route, "". With a nil mux,
// only Request.Pattern is used.
//
//	httplimit.WithKeyFunc(httplimit.PerRoute(mux, httplimit.ClientIP()))
func PerRoute(mux *http.ServeMux, key KeyFunc) KeyFunc {
	if key == nil {
		key = ClientIP()
	}
	return func(r *http.Request) (string, error) {
		k, err := key(r)
		if err != nil {
			return "", err
		}
		pattern := r.Pattern
		if pattern == "" && mux != nil {
			_, pattern = mux.Handler(r)
		}
		return pattern + " " + k, nil
	}
}

package httplimit

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/ratekeeper/ratekeeper/internal/clientip"
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
const DefaultIPv6Prefix = clientip.DefaultIPv6Prefix

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
	header := "X-Forwarded-For"
	if cfg.Header != "" {
		if !clientip.IsToken(cfg.Header) {
			return nil, fmt.Errorf("httplimit: forwarding header %q is not a header name", cfg.Header)
		}
		header = textproto.CanonicalMIMEHeaderKey(cfg.Header)
	}
	res, err := clientip.New(cfg.TrustedProxies, cfg.IPv6Prefix, header == "Forwarded")
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	c := &clientIP{res: res, header: header}
	return c.key, nil
}

type clientIP struct {
	res    *clientip.Resolver
	header string // canonical
}

func (c *clientIP) key(r *http.Request) (string, error) {
	peer, err := clientip.ParseNode(r.RemoteAddr)
	if err != nil {
		return "", fmt.Errorf("httplimit: peer address (RemoteAddr) %q: %w", r.RemoteAddr, err)
	}
	addr, err := c.res.Client(peer, func() []string { return r.Header[c.header] })
	if err != nil {
		return "", fmt.Errorf("httplimit: %s: %w", c.header, err)
	}
	return c.res.Key(addr), nil
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

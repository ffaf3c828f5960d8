package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ratekeeper/ratekeeper/internal/clientip"
)

// DefaultIPv6Prefix is the length of the prefix that IPv6 clients are keyed
// on: one /64 is one subscriber's network.
const DefaultIPv6Prefix = clientip.DefaultIPv6Prefix

// ClientIPConfig configures NewClientIP.
type ClientIPConfig struct {
	// TrustedProxies are the CIDRs ("10.0.0.0/8", "2001:db8::/32") or
	// single addresses of the proxies in front of the server. A call's
	// forwarding metadata is read only when its peer is one of them.
	TrustedProxies []string
	// Metadata is the one metadata key that the trusted proxies write the
	// client's address in: x-forwarded-for if empty (as Envoy writes it).
	// "forwarded" is parsed as RFC 7239; any other key as a
	// comma-separated list of addresses, like x-forwarded-for.
	Metadata string
	// IPv6Prefix is the length of the prefix that IPv6 clients are keyed on,
	// 1 to 128; 0 means DefaultIPv6Prefix.
	IPv6Prefix int
}

// ClientIP returns a KeyFunc that keys calls on the client's IP address,
// "ip:203.0.113.7", with IPv6 clients keyed on their /64, as httplimit's
// ClientIP does, with the same parser.
//
// The client is the call's peer unless the peer is one of trustedProxies
// (CIDRs, or single addresses). Then the x-forwarded-for metadata, and no
// other, is read from right to left, as the proxies appended to it:
// trusted proxies are skipped, and the first address that is not one is
// the client. Entries further left were written by the client and are
// ignored. Without trustedProxies, what the client wrote is never read.
//
// ClientIP panics if an element of trustedProxies is neither a CIDR nor
// an address: with addresses from configuration, use NewClientIP, which
// returns the error.
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
	key := "x-forwarded-for"
	if cfg.Metadata != "" {
		if !clientip.IsToken(cfg.Metadata) {
			return nil, fmt.Errorf("grpclimit: forwarding metadata key %q is not a metadata key", cfg.Metadata)
		}
		key = strings.ToLower(cfg.Metadata)
	}
	res, err := clientip.New(cfg.TrustedProxies, cfg.IPv6Prefix, key == "forwarded")
	if err != nil {
		return nil, fmt.Errorf("grpclimit: %w", err)
	}
	return func(ctx context.Context, _ string) (string, error) {
		p, ok := peer.FromContext(ctx)
		if !ok || p.Addr == nil {
			return "", errors.New("grpclimit: the call has no peer address")
		}
		addr, err := clientip.ParseNode(p.Addr.String())
		if err != nil {
			return "", fmt.Errorf("grpclimit: peer address %q: %w", p.Addr.String(), err)
		}
		addr, err = res.Client(addr, func() []string { return metadata.ValueFromIncomingContext(ctx, key) })
		if err != nil {
			return "", fmt.Errorf("grpclimit: %s: %w", key, err)
		}
		return res.Key(addr), nil
	}, nil
}

// MetadataKey returns a KeyFunc that keys calls on the value of the
// metadata key name, such as an API key or a user ID set by an
// authenticating proxy: MetadataKey("x-api-key") keys on
// "x-api-key:<value>". A call without it, or with an empty value, cannot
// be keyed. Clients choose their metadata: limit on it only behind
// authentication, or a client evades the limit by inventing values. The
// value appears as it is in the store's keys and in the QuotaFailure of a
// denied call; if it is a secret, key on what it authenticates instead.
func MetadataKey(name string) KeyFunc {
	name = strings.ToLower(name)
	prefix := name + ":"
	return func(ctx context.Context, _ string) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 || vs[0] == "" {
			return "", fmt.Errorf("grpclimit: the call has no %s metadata", name)
		}
		return prefix + vs[0], nil
	}
}

// FullMethod returns a KeyFunc that keys calls on their full method,
// "/package.Service/Method": one limit per method, shared by all clients.
func FullMethod() KeyFunc {
	return func(_ context.Context, method string) (string, error) { return method, nil }
}

// PerMethod returns a KeyFunc that keys each call on key's key and its
// full method, so that every method of a client has a limit of its own:
// "<method> <key>", as in "/shop.Orders/Checkout ip:192.0.2.1". A nil key
// is ClientIP().
func PerMethod(key KeyFunc) KeyFunc {
	if key == nil {
		key = ClientIP()
	}
	return func(ctx context.Context, method string) (string, error) {
		k, err := key(ctx, method)
		if err != nil {
			return "", err
		}
		return method + " " + k, nil
	}
}

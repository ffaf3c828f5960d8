package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/server"
)

// store is the service's store and how to tell it answers.
type store struct {
	store server.Store
	// ready reports whether Redis answers; nil for the in-process store.
	ready    func() error
	describe string // where, without credentials
	close    func() error
}

// readyTimeout bounds the PING of a readiness check.
const readyTimeout = time.Second

// openStore opens the store a Redis URL names, or the in-process store
// without one. It does not contact Redis: the service starts while Redis
// is down, and is ready once it answers.
//
// The URL forms:
//
//	host:port                                        one server, as envoyproxy/ratelimit's REDIS_URL
//	redis://[user:password@]host:port[/db]           one server (rediss:// for TLS)
//	redis+cluster://[user:password@]host:port[?addr=host:port&addr=…]
//	                                                 a Redis Cluster: seed nodes
//	redis+sentinel://[user:password@]host:port[?addr=host:port&…]&master_name=NAME
//	                                                 Sentinel: sentinels, and the primary's name
//
// (rediss+cluster:// and rediss+sentinel:// for TLS), with go-redis's
// options as query parameters (dial_timeout=3s, pool_size=20, …).
func openStore(rawURL, prefix string) (*store, error) {
	if rawURL == "" {
		m := memstore.New()
		return &store{store: m, describe: "in process", close: m.Close}, nil
	}
	client, err := redisClient(rawURL)
	if err != nil {
		return nil, err
	}
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		return client.Ping(ctx).Err()
	}
	return &store{
		store:    redisstore.New(client, redisstore.WithKeyPrefix(prefix)),
		ready:    ready,
		describe: redact(rawURL),
		close:    client.Close,
	}, nil
}

// redisClient makes the go-redis client of a URL.
func redisClient(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		// envoyproxy/ratelimit's REDIS_URL: a bare host:port.
		if _, _, err := net.SplitHostPort(rawURL); err != nil {
			return nil, fmt.Errorf("invalid Redis URL %s: want host:port or redis://host:port", redact(rawURL))
		}
		scheme, rest = "redis", rawURL
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" {
		return nil, fmt.Errorf("invalid Redis URL %s: the scheme must be redis, rediss, redis+cluster or redis+sentinel", redact(rawURL))
	}
	plain := base + "://" + rest
	var client redis.UniversalClient
	switch kind {
	case "":
		opts, err := redis.ParseURL(plain)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		client = redis.NewClient(opts)
	case "cluster":
		opts, err := redis.ParseClusterURL(plain)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		client = redis.NewClusterClient(opts)
	case "sentinel":
		opts, err := redis.ParseFailoverURL(plain)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		if opts.MasterName == "" {
			return nil, fmt.Errorf("invalid Redis URL %s: Sentinel needs master_name=NAME", redact(rawURL))
		}
		client = redis.NewFailoverClient(opts)
	default:
		return nil, fmt.Errorf("invalid Redis URL %s: unknown kind %q (cluster or sentinel)", redact(rawURL), kind)
	}
	return client, nil
}

// urlError reports a URL go-redis refused, without the URL it quotes,
// which may hold a password.
func urlError(rawURL string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("invalid Redis URL %s: %v", redact(rawURL), err)
}

// redact hides a URL's password.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

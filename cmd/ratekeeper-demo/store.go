package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

const (
	// defaultRedisURL is where the demo looks for Redis when it is not told.
	defaultRedisURL = "redis://localhost:6379"
	// probeTimeout bounds that look, so that the demo starts at once on a
	// machine without Redis.
	probeTimeout = 300 * time.Millisecond
	// connectTimeout bounds the first PING to a Redis the user named.
	connectTimeout = 5 * time.Second
)

// Backend names, as GET /state reports them.
const (
	backendRedis  = "redis"
	backendMemory = "memory"
)

// backend is where the demo keeps its limits.
type backend struct {
	store ratekeeper.Store
	kind  string // backendRedis or backendMemory
	addr  string // Redis's address, for display; never its credentials
	close func() error
}

// connect opens the store named by redisURL (REDIS_URL or -redis), and
// fails if it cannot be reached: the user asked for that Redis, and
// limits silently kept elsewhere would mislead. With no URL, it tries
// probeURL briefly and falls back to an in-process store, saying so on
// logger.
func connect(ctx context.Context, redisURL, probeURL string, logger *slog.Logger) (*backend, error) {
	if redisURL != "" {
		return dialRedis(ctx, redisURL, connectTimeout)
	}
	be, err := dialRedis(ctx, probeURL, probeTimeout)
	if err == nil {
		return be, nil
	}
	if cause := errors.Unwrap(err); cause != nil {
		err = cause // without the URL, which the message gives
	}
	logger.Warn("using the in-process store; set REDIS_URL to share limits across servers",
		"no_redis_at", redact(probeURL), "err", err)
	store := memstore.New()
	return &backend{store: store, kind: backendMemory, close: store.Close}, nil
}

// dialRedis connects to the Redis at rawURL (redis:// or rediss://, with
// an optional username and password) and checks that it answers a PING
// within timeout.
func dialRedis(ctx context.Context, rawURL string, timeout time.Duration) (*backend, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which holds the password
		}
		return nil, fmt.Errorf("invalid Redis URL %s: %v", redact(rawURL), err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A plain dial first: go-redis would retry, and log every retry, before
	// reporting a server that is simply not there.
	var d net.Dialer
	conn, err := d.DialContext(ctx, opts.Network, opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", redact(rawURL), err)
	}
	conn.Close()
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("cannot reach Redis at %s: %w", redact(rawURL), err)
	}
	return &backend{store: redisstore.New(client), kind: backendRedis, addr: opts.Addr, close: client.Close}, nil
}

// redact returns rawURL without its password, for messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable)"
	}
	return u.Redacted()
}

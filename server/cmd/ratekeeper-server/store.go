package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/server"
	"github.com/ratekeeper/ratekeeper/server/internal/quota"
)

// store is the service's store and how to tell it answers.
type store struct {
	store server.Store
	// quota steps the quota buckets of the rate limit quota service:
	// in Redis, under the key prefix, or in process.
	quota server.Stepper
	// ready reports whether Redis answers; nil for the in-process store.
	ready    func() error
	describe string // where, without credentials
	close    func() error
}

// readyTimeout bounds a readiness check.
const readyTimeout = time.Second

// openStore opens the store the Redis settings name, or the in-process
// store without a Redis URL. It does not contact Redis: the service
// starts while Redis is down, and is ready once it answers.
func openStore(r redisSettings, prefix string, memKeys int, onCertError func(error)) (*store, error) {
	if r.url == "" {
		m := memstore.New(memstore.WithMaxKeys(memKeys))
		return &store{store: m, quota: &quota.Memory{}, describe: "in process", close: m.Close}, nil
	}
	client, err := redisClient(r, onCertError)
	if err != nil {
		return nil, err
	}
	rs := redisstore.New(client, redisstore.WithKeyPrefix(prefix))
	// Ready, not PING: a Redis out of memory answers PING but refuses
	// every decision; and its success ends the breaker's fail-fast state.
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		return rs.Ready(ctx)
	}
	return &store{
		store:    rs,
		quota:    &quota.Redis{Client: client, Prefix: prefix},
		ready:    ready,
		describe: r.describe(),
		close:    client.Close,
	}, nil
}

// redisClient makes the go-redis client of the settings. The client bounds
// each call by its context's deadline (ContextTimeoutEnabled): Envoy gives
// every call one, and the store then needs no goroutine of its own to keep
// it.
func redisClient(r redisSettings, onCertError func(error)) (redis.UniversalClient, error) {
	t, err := r.target()
	if err != nil {
		return nil, err
	}
	if err := r.overlay(t.common(), onCertError); err != nil {
		return nil, err
	}
	switch {
	case t.cluster != nil:
		return redis.NewClusterClient(t.cluster), nil
	case t.failover != nil:
		return redis.NewFailoverClient(t.failover), nil
	}
	return redis.NewClient(t.single), nil
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

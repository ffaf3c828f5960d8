// Package redisstore is a ratekeeper.Store kept in Redis: every decision is
// one atomic Lua script call, so any number of application servers share
// one limit. It works with a standalone Redis, Sentinel (failover clients)
// and Redis Cluster, through go-redis's redis.UniversalClient.
//
// The scripts read the server's clock (TIME), keep integer state, and set
// an expiry on every key at the moment its state would be full again, so
// idle keys vanish without changing any decision. They are sent with
// EVALSHA and loaded on demand: a SCRIPT FLUSH, a restart or a failover
// never surfaces as an error.
//
// Concurrent decisions are coalesced into pipelines (WithAutoPipelining):
// a lone caller makes one round trip per decision, and many callers share
// one round trip per batch. Every call returns when its context ends,
// whatever Redis does. An optional deny cache (WithDenyCache) answers
// repeat denials in process, exactly, until they run out.
package redisstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algorithm is how one ratekeeper algorithm runs in Redis.
type algorithm struct {
	script *redis.Script
	src    string
	params int      // how many of Spec.Params the script reads
	keys   []string // suffixes of the keys it touches, after the hash tag
}

var algorithms = map[string]*algorithm{
	ratekeeper.AlgorithmTokenBucket:          newAlgorithm(3, ":tb", "token_bucket.lua"),
	ratekeeper.AlgorithmGCRA:                 newAlgorithm(2, ":gcra", "gcra.lua"),
	ratekeeper.AlgorithmFixedWindow:          newAlgorithm(2, ":fw", "fixed_window.lua"),
	ratekeeper.AlgorithmSlidingWindowLog:     newAlgorithm(2, ":swl", "sliding_window_log.lua"),
	ratekeeper.AlgorithmSlidingWindowCounter: newAlgorithm(2, ":swc", "muldiv.lua", "sliding_window_counter.lua"),
	ratekeeper.AlgorithmLeakyBucket:          newAlgorithm(2, ":lb", "leaky_bucket.lua"),
}

// newAlgorithm builds a script from lib.lua, the helpers every script
// shares, and files; its one key ends with suffix.
func newAlgorithm(params int, suffix string, files ...string) *algorithm {
	var src strings.Builder
	for _, f := range append([]string{"lib.lua"}, files...) {
		part, err := luaFiles.ReadFile("lua/" + f)
		if err != nil {
			panic(err) // embedded at build time; cannot happen
		}
		src.Write(part)
		src.WriteByte('\n')
	}
	return &algorithm{script: redis.NewScript(src.String()), src: src.String(), params: params, keys: []string{suffix}}
}

// DefaultKeyPrefix begins every Redis key the store writes.
const DefaultKeyPrefix = "rk:"

// Expiry slack, added to the time at which a key's state is full again: a
// millisecond covers the rounding of microseconds up to PX milliseconds;
// with a supplied clock, Redis counts the expiry on its own clock, so
// allow a second for the two clocks to disagree.
const (
	serverClockSlack   = 1
	suppliedClockSlack = 1000
)

// Store keeps ratekeeper state in Redis. It is safe for concurrent use.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	now       func() time.Time
	pipeliner *pipeliner // nil without auto-pipelining
	denies    *denyCache // nil without a deny cache
	// contextTimeouts: the client bounds each call by its context.
	contextTimeouts bool
}

// contextTimeouts reports whether client honours context deadlines
// (ContextTimeoutEnabled); go-redis otherwise bounds calls by its own
// timeouts only.
func contextTimeouts(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

var _ ratekeeper.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithKeyPrefix sets the prefix of every Redis key (default
// DefaultKeyPrefix), to keep several applications apart in one Redis.
// Braces in the prefix are escaped, so they never form a hash tag.
func WithKeyPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = escapeBraces(prefix) }
}

// WithClock makes the store take the time from now instead of from the
// Redis server's clock (TIME). Use it for deterministic tests, or with a
// managed Redis that rejects TIME in scripts; all application servers
// sharing a limit should then have synchronized clocks.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithAutoPipelining turns the coalescing of concurrent decisions into
// pipelines on or off (default on). While no round trip is in flight, a
// decision is sent at once; decisions arriving meanwhile wait for it to
// return and go together in one pipeline. It adds no delay to a lone
// caller and, under load, cuts round trips and Redis's per-command
// overhead. Off, each decision is its own round trip on its own pooled
// connection.
func WithAutoPipelining(on bool) Option {
	return func(s *Store) {
		s.pipeliner = nil
		if on {
			s.pipeliner = &pipeliner{client: s.client}
		}
	}
}

// WithDenyCache keeps up to maxKeys recent denials in process, so that a
// key denied until T is answered locally, without a round trip, until T:
// repeat abusers cost Redis nothing. This is exact, because only time adds
// allowance: Allowed and RetryAfter are what Redis would answer (other
// servers can only take more); Remaining is the one Redis last reported,
// and ResetAfter is aged since. Only the denied cost is answered locally.
// Reset on this store forgets the key's denial; a Reset made through
// another server is seen here once the denial runs out.
func WithDenyCache(maxKeys int) Option {
	return func(s *Store) {
		s.denies = nil
		if maxKeys > 0 {
			s.denies = newDenyCache(maxKeys)
		}
	}
}

// DenyCacheHits returns how many decisions the deny cache answered.
func (s *Store) DenyCacheHits() int64 {
	if s.denies == nil {
		return 0
	}
	return s.denies.hits.Load()
}

// New returns a Store over client. It does not contact Redis: scripts are
// loaded on first use, so an application can start while Redis is down.
func New(client redis.UniversalClient, opts ...Option) *Store {
	s := &Store{client: client, prefix: DefaultKeyPrefix, contextTimeouts: contextTimeouts(client)}
	s.pipeliner = &pipeliner{client: client}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Decide runs spec's script for key, atomically, in one round trip.
func (s *Store) Decide(ctx context.Context, key string, spec ratekeeper.Spec, n int64) (ratekeeper.Result, error) {
	alg, ok := algorithms[spec.Algorithm]
	if !ok {
		return ratekeeper.Result{}, fmt.Errorf("redisstore: %w: unknown algorithm %q", ratekeeper.ErrInvalidPolicy, spec.Algorithm)
	}
	var sent time.Time // local time, for the deny cache
	if s.denies != nil || s.now != nil {
		sent = s.clock()
	}
	if s.denies != nil {
		if res, ok := s.denies.lookup(spec, key, n, sent); ok {
			return res, nil
		}
	}
	args := make([]any, 0, 3+len(spec.Params))
	if s.now == nil {
		args = append(args, n, "", serverClockSlack)
	} else {
		args = append(args, n, sent.UnixMicro(), suppliedClockSlack)
	}
	for _, p := range spec.Params[:alg.params] {
		args = append(args, p)
	}
	c := &call{alg: alg, keys: s.keys(key, alg), args: args, done: make(chan struct{})}
	// A call waits on a goroutine of its own only when it must be able to
	// give up at ctx's end and go-redis would not: a handoff costs more
	// than the rest of the client's work.
	inline := ctx.Done() == nil || s.contextTimeouts
	switch {
	case s.pipeliner != nil:
		s.pipeliner.submit(ctx, c, inline)
	case inline:
		c.run(ctx, s.client)
		close(c.done)
	default:
		go func() {
			c.run(context.Background(), s.client)
			close(c.done)
		}()
	}
	reply, err := c.wait(ctx)
	if err != nil {
		return ratekeeper.Result{}, fmt.Errorf("redisstore: %s for %q: %w", spec.Algorithm, key, err)
	}
	res, err := parseReply(spec, reply)
	if err == nil && !res.Allowed && s.denies != nil {
		s.denies.remember(spec, key, n, sent, res)
	}
	return res, err
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Reset deletes key's state under spec.
func (s *Store) Reset(ctx context.Context, key string, spec ratekeeper.Spec) error {
	alg, ok := algorithms[spec.Algorithm]
	if !ok {
		return fmt.Errorf("redisstore: %w: unknown algorithm %q", ratekeeper.ErrInvalidPolicy, spec.Algorithm)
	}
	if s.denies != nil {
		s.denies.forget(spec, key)
	}
	if err := s.client.Del(ctx, s.keys(key, alg)...).Err(); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	return nil
}

// Key returns the Redis key that holds key's state under spec: the caller's
// key inside a hash tag, so that different callers spread over the slots
// of a Redis Cluster while all the keys of one caller share a slot.
func (s *Store) Key(key string, spec ratekeeper.Spec) string {
	alg, ok := algorithms[spec.Algorithm]
	if !ok {
		return ""
	}
	return s.keys(key, alg)[0]
}

func (s *Store) keys(key string, alg *algorithm) []string {
	tag := s.prefix + "{" + escapeBraces(key) + "}"
	keys := make([]string, len(alg.keys))
	for i, suffix := range alg.keys {
		keys[i] = tag + suffix
	}
	return keys
}

// escapeBraces keeps a caller's key from closing the hash tag early (or
// leaving it empty, which would hash each key on its own): "}" becomes
// "%7D", "{" "%7B", and "%" "%25", so distinct keys stay distinct.
func escapeBraces(key string) string {
	if !strings.ContainsAny(key, "{}%") {
		return key
	}
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(key)
}

var errReply = errors.New("redisstore: unexpected script reply")

// parseReply reads the scripts' reply {allowed, remaining, retry after,
// reset after}, in the Spec's integer units.
func parseReply(spec ratekeeper.Spec, reply any) (ratekeeper.Result, error) {
	fields, ok := reply.([]any)
	if !ok || len(fields) != 4 {
		return ratekeeper.Result{}, fmt.Errorf("%w: %v", errReply, reply)
	}
	var v [4]int64
	for i, f := range fields {
		// Every value is an integer in [0, 2^53): anything else did not
		// come from these scripts.
		if v[i], ok = f.(int64); !ok || v[i] < 0 || v[i] >= 1<<53 {
			return ratekeeper.Result{}, fmt.Errorf("%w: %v", errReply, reply)
		}
	}
	return spec.Result(v[0] == 1, v[1], v[2], v[3]), nil
}

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
// one round trip per batch; over a client of one server, the batch's
// decisions under one algorithm share one script call. Every call returns when its context ends,
// whatever Redis does. While Redis refuses or drops connections, calls
// fail at once with ErrUnreachable instead of waiting, and they resume as
// soon as Redis answers again. An optional deny cache (WithDenyCache)
// answers repeat denials in process, exactly, until they run out.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/results"
)

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
	breaker   *breaker   // nil for a cluster client
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
// sharing a limit should then have synchronized clocks. A clock that lags
// the one that last wrote a key admits nothing more for it (see
// docs/operations.md). A time outside 1970 to 2200 is an error matching
// ratekeeper.ErrInvalidTime.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithAutoPipelining turns the coalescing of concurrent decisions into
// pipelines on or off (default on). While no round trip is in flight, a
// decision is sent at once; decisions arriving meanwhile wait for it to
// return and go together in one pipeline. It adds no delay to a lone
// caller and, under load, cuts round trips and Redis's per-command
// overhead. Over a *redis.Client (one server, or Sentinel's primary) the
// batch's decisions under one algorithm go as one script call, which
// decides them one after the other at one reading of the server's clock,
// each exactly as alone; a cluster client sends each in a call of its
// own, since different callers' keys live in different slots (as does a
// *redis.Client of a cluster node, from the first batch that the node
// refuses with CROSSSLOT; its calls are sent again, alone). Off, each
// decision is its own round trip on its own pooled connection.
func WithAutoPipelining(on bool) Option {
	return func(s *Store) {
		s.pipeliner = nil
		if on {
			s.pipeliner = newPipeliner(s.client)
		}
	}
}

// WithDenyCache keeps up to maxKeys recent denials in process, so that a
// key denied until T is answered locally, without a round trip, until T:
// repeat abusers cost Redis nothing. This is exact, because only time adds
// allowance: Allowed and RetryAfter are what Redis would answer (other
// servers can only take more); Remaining is the one Redis last reported,
// and ResetAfter is aged since. Only the denied cost is answered locally.
// Reset on this store forgets the key's denial, and a denial on its way
// back from Redis during a Reset is not cached.
//
// Exact holds while nobody else adds allowance. Two things do, and the
// cache does not see them: a Reset made through another server, and a
// limiter applying other parameters under the same name (another server
// still on an old limit, say, with a faster refill or a larger capacity).
// A key denied here is then denied until its denial runs out, at most the
// RetryAfter it was cached with, though Redis would allow it; the cache
// never allows more than Redis would. Denials are cached per policy
// parameters, so limiters with different limits on one store never answer
// each other's. To change a limit at once everywhere, give the new policy
// a new name: its keys start full.
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
	s := &Store{client: client, prefix: DefaultKeyPrefix, contextTimeouts: contextTimeouts(client), breaker: newBreaker(client)}
	s.pipeliner = newPipeliner(client)
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Decide runs spec's script for key, atomically, in one round trip. The
// policies of an All are decided by one script call, over keys that share
// the caller's hash tag. An empty or oversized key is an error wrapping
// ratekeeper.ErrInvalidKey; a cost outside 0 to spec.MaxCost(), one
// wrapping ratekeeper.ErrInvalidCost (and ErrCostTooHigh above it).
func (s *Store) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (ratekeeper.Result, error) {
	alg, err := scriptOf(spec)
	if err == nil {
		err = checkInput(key, spec, n)
	}
	if err != nil {
		return ratekeeper.Result{}, err
	}
	var sent time.Time // local time, for the deny cache
	if s.denies != nil || s.now != nil {
		sent = s.clock()
	}
	if s.now != nil {
		if err := driver.CheckTime(sent.UnixMicro()); err != nil {
			return ratekeeper.Result{}, fmt.Errorf("redisstore: %w", err)
		}
	}
	var gen uint64 // the deny cache's generation before the call
	if s.denies != nil {
		res, g, ok := s.denies.lookup(spec, key, n, sent)
		if ok {
			return res, nil
		}
		gen = g
	}
	if err := s.breaker.check(); err != nil {
		return ratekeeper.Result{}, fmt.Errorf("redisstore: %s for %q: %w", spec.Algorithm(), key, err)
	}
	c := &call{alg: alg, keys: s.keys(key, spec), args: s.args(spec, n, sent), ctx: ctx}
	var reply any
	if inline := s.inline(ctx); s.pipeliner != nil {
		reply, err = s.pipeliner.do(ctx, c, inline)
	} else if inline {
		c.run(ctx, s.client)
		reply, err = c.reply, c.err
	} else {
		c.done = make(chan struct{})
		go func() {
			// go-redis still watches ctx until the command is sent (for
			// a connection, a dial): a call whose caller gave up by then
			// never reaches Redis.
			c.run(ctx, s.client)
			close(c.done)
		}()
		reply, err = c.wait(ctx)
	}
	if err != nil {
		s.breaker.failed(err)
		return ratekeeper.Result{}, fmt.Errorf("redisstore: %s for %q: %w", spec.Algorithm(), key, err)
	}
	res, err := parseReply(spec, reply)
	if err == nil && !res.Allowed && s.denies != nil {
		s.denies.remember(spec, key, n, sent, res, gen)
	}
	return res, err
}

// inline reports whether a call can run on its caller's goroutine and
// still end by ctx's end. If not, it is handed off to a goroutine of its
// own, and waited for until ctx ends. go-redis bounds a call by ctx's
// deadline only with ContextTimeoutEnabled (and never by a cancellation
// once the command is sent), else by its own timeouts. A hand-off costs
// more than the rest of the client's work (it wakes another thread
// twice), so it is made only when needed.
func (s *Store) inline(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	_, deadline := ctx.Deadline()
	return deadline && s.contextTimeouts
}

// args are the script's ARGV: the cost, the time or "" for the server's
// clock, the expiry slack, then the parameters; for an All, each policy's
// algorithm and parameters.
func (s *Store) args(spec *driver.ValidSpec, n int64, sent time.Time) []any {
	args := make([]any, 0, 3+5*max(spec.NumParts(), 1))
	if s.now == nil {
		args = append(args, n, "", serverClockSlack)
	} else {
		args = append(args, n, sent.UnixMicro(), suppliedClockSlack)
	}
	if !spec.IsAll() {
		p := spec.Params()
		return append(args, p.Capacity, p.Rate, p.Interval, p.Cost)
	}
	for i := range spec.NumParts() {
		part := spec.Part(i)
		p := part.Params()
		args = append(args, part.Algorithm(), p.Capacity, p.Rate, p.Interval, p.Cost)
	}
	return args
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Reset deletes key's state under spec (every policy's, for an All).
func (s *Store) Reset(ctx context.Context, key string, spec *driver.ValidSpec) error {
	if _, err := scriptOf(spec); err != nil {
		return err
	}
	if err := s.breaker.check(); err != nil {
		return fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	err := s.client.Del(ctx, s.keys(key, spec)...).Err()
	if s.denies != nil {
		// After the DEL, failed or not: a denial decided before it is
		// then never cached.
		s.denies.forget(spec, key)
	}
	if err != nil {
		s.breaker.failed(err)
		return fmt.Errorf("redisstore: reset %q: %w", key, err)
	}
	return nil
}

var errReply = errors.New("redisstore: unexpected script reply")

// parseReply reads the scripts' reply, four integers per policy: allowed,
// remaining, retry after and reset after, in the spec's integer units.
func parseReply(spec *driver.ValidSpec, reply any) (ratekeeper.Result, error) {
	parts := max(spec.NumParts(), 1)
	fields, ok := reply.([]any)
	if !ok || len(fields) != 4*parts {
		return ratekeeper.Result{}, fmt.Errorf("%w: %v", errReply, reply)
	}
	var v [4 * driver.MaxParts]int64
	for i, f := range fields {
		// Every value is an integer in [0, 2^53): anything else did not
		// come from these scripts.
		if v[i], ok = f.(int64); !ok || v[i] < 0 || v[i] >= 1<<53 {
			return ratekeeper.Result{}, fmt.Errorf("%w: %v", errReply, reply)
		}
	}
	var out [driver.MaxParts]driver.Outcome
	for i := range parts {
		out[i] = driver.Outcome{Allowed: v[4*i] == 1, Remaining: v[4*i+1], RetryAfter: v[4*i+2], ResetAfter: v[4*i+3]}
	}
	if !spec.IsAll() {
		return results.Of(spec, out[0]), nil
	}
	return results.Join(spec, out[:parts]), nil
}

// Package redisstore is a ratekeeper.Store kept in Redis: every decision is
// one atomic Lua script call, so any number of application servers share
// one limit. It works with a standalone Redis, Sentinel (failover clients)
// and Redis Cluster, through go-redis's redis.UniversalClient.
//
// The scripts read the server's clock (TIME), keep integer state, and set
// an expiry on every key at the moment its state would be full again, so
// idle keys vanish without changing any decision. On Redis 7 and later
// each script is a library of functions, loaded once per server and
// called with FCALL, which spares Redis the script's set-up on every call
// (a quarter of a lone decision's cost); where Redis refuses functions
// (an older server, or an ACL without FCALL and FUNCTION LOAD) they are
// sent with EVALSHA. Both are loaded on demand: a FUNCTION FLUSH, a
// SCRIPT FLUSH, a restart or a failover never surfaces as an error.
//
// Concurrent decisions are coalesced into pipelines (WithAutoPipelining):
// a lone caller makes one round trip per decision, and many callers share
// one round trip per batch; over a client of one server, the batch's
// decisions under one algorithm share one script call. Every call returns when its context ends,
// whatever Redis does. While Redis refuses or drops connections, calls
// fail at once with ErrUnreachable instead of waiting, and they resume as
// soon as Redis answers again. An optional deny cache (WithDenyCache)
// answers repeat denials in process until they run out, never looser than
// Redis (WithDenyCache says what it guarantees).
// DecideAll decides requests on several keys together, all or nothing, in
// one script call (one per hash slot over a cluster).
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/driver"
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
	skew      int // WithClockSkew, in milliseconds; 0 the default
	pipeliner *pipeliner
	denies    *denyCache // nil without a deny cache
	breaker   *breaker   // nil for a cluster client
	// contextTimeouts: the client bounds each call by its context.
	contextTimeouts bool
	// splitSlots: DecideAll makes a script call per hash slot, over a
	// cluster (see DecideAll).
	splitSlots atomic.Bool
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

var (
	_ driver.Store        = (*Store)(nil)
	_ driver.MultiDecider = (*Store)(nil)
)

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
// docs/operations.md); keys still expire on Redis's clock (see
// WithClockSkew). A time outside 1970 to 2200 is an error matching
// ratekeeper.ErrInvalidTime.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithClockSkew sets how far the clock of WithClock may lag the Redis
// server's (default 1 s): Redis expires keys on its own clock, so each
// key is kept that much longer than its state needs, lest it expire while
// the supplied clock still finds it holding something. Keys then take as
// much longer to vanish; decisions never change. A skew below a
// millisecond counts as one. It has no effect without WithClock.
func WithClockSkew(d time.Duration) Option {
	return func(s *Store) { s.skew = int(max(1, (d+time.Millisecond-1)/time.Millisecond)) }
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
// refuses with CROSSSLOT; its calls are sent again, alone). Over a
// cluster client, decisions are queued and batched per master, so that a
// master down or hung holds up only the decisions on its own keys. Off,
// each decision is its own round trip on its own pooled connection.
func WithAutoPipelining(on bool) Option {
	return func(s *Store) {
		s.pipeliner = newPipeliner(s.client, on)
	}
}

// WithDenyCache keeps up to maxKeys recent denials in process, so that a
// key denied until T is answered locally, without a round trip, until T:
// repeat abusers cost Redis nothing. Only the denied cost is answered
// locally, and only until the RetryAfter Redis gave it; Remaining is the
// one Redis reported, and the times are aged since.
//
// What it guarantees:
//   - It never allows: it answers only denials, so it is never looser
//     than Redis.
//   - Over this store's own calls, one after another, its answers are
//     exactly Redis's: this store's takes, charges, refunds and Resets on
//     a key drop the key's cached denial (a charge or a refund, and a
//     Reset, even when the call failed here, since Redis may have made
//     it), and a denial on its way back from Redis during a Reset is not
//     cached.
//   - Calls through other stores, on other servers, are not seen. A take
//     or a charge there makes Redis's wait longer than the cached one:
//     the cached RetryAfter is then too short, and the next request after
//     it goes to Redis, which denies again. A refund or a Reset there (the
//     service's is_negative_hits, say), or a limiter applying other
//     parameters under the same name (another server still on an old
//     limit), adds allowance: the cache then denies, at most until its
//     RetryAfter, what Redis would allow.
//
// Denials are cached per policy parameters, so limiters with different
// limits on one store never answer each other's. To change a limit at
// once everywhere, give the new policy a new name: its keys start full.
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
	s.pipeliner = newPipeliner(client, true)
	_, single := client.(*redis.Client)
	s.splitSlots.Store(!single)
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Decide runs spec's script for key, atomically, in one round trip. The
// policies of an All are decided by one script call, over keys that share
// the caller's hash tag. Input that a Limiter never passes on fails
// driver.CheckRequest, with its errors: the scripts assume none of it (a
// negative cost would be allowed, and a huge one would overflow Lua's
// numbers).
func (s *Store) Decide(ctx context.Context, key string, spec *driver.ValidSpec, n int64) (driver.Decision, error) {
	return s.decideMode(ctx, key, spec, n, driver.Take)
}

// decideMode checks the input of a decision in mode (driver.CheckRequest
// for a Take, driver.CheckCharge for a Charge or a Refund), and decides
// it.
func (s *Store) decideMode(ctx context.Context, key string, spec *driver.ValidSpec, n int64, mode driver.Mode) (driver.Decision, error) {
	alg, err := scriptOf(spec)
	switch {
	case err != nil:
	case mode == driver.Take:
		err = driver.CheckRequest(key, spec, n)
	default:
		err = driver.CheckCharge(key, spec, n)
	}
	if err != nil {
		return driver.Decision{}, err
	}
	return s.decide(ctx, alg, key, spec, n, mode)
}

// decide runs alg's script for key in mode, the input checked.
func (s *Store) decide(ctx context.Context, alg *algorithm, key string, spec *driver.ValidSpec, n int64, mode driver.Mode) (driver.Decision, error) {
	var sent time.Time // local time, for the deny cache
	if s.denies != nil || s.now != nil {
		sent = s.clock()
	}
	if s.now != nil {
		if err := driver.CheckTime(sent.UnixMicro()); err != nil {
			return driver.Decision{}, fmt.Errorf("redisstore: %w", err)
		}
	}
	var gen uint64 // the deny cache's generation before the call
	if s.denies != nil && mode == driver.Take {
		res, g, ok := s.denies.lookup(spec, key, n, sent)
		if ok {
			return res, nil
		}
		gen = g
	}
	if err := s.breaker.check(); err != nil {
		return driver.Decision{}, fmt.Errorf("redisstore: %s for %q: %w", spec.Algorithm(), key, err)
	}
	c := s.call(ctx, alg, key, spec, n, mode, sent)
	err := s.send(ctx, []*call{c})
	if err == nil {
		err = c.err
	}
	if s.denies != nil && mode != driver.Take {
		// A refund adds allowance, and a charge makes a cached denial
		// too short: after the call, failed or not (Redis may have made
		// a call that failed here), as Reset does.
		s.denies.forget(spec, key)
	}
	if err != nil {
		s.breaker.failed(err)
		return driver.Decision{}, fmt.Errorf("redisstore: %s for %q: %w", spec.Algorithm(), key, err)
	}
	res, err := parseReply(spec, c.reply)
	switch {
	case s.denies == nil || err != nil || mode != driver.Take:
	case !res.Allowed:
		s.denies.remember(spec, key, n, sent, res, gen)
	case n > 0:
		// A take of another cost makes a cached denial too short.
		s.denies.drop(spec, key)
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

// send runs calls, one script call or several in one pipeline, by the
// end of ctx: it returns when every call has its reply or error, or with
// ctx's error if ctx ends first.
func (s *Store) send(ctx context.Context, calls []*call) error {
	return s.pipeliner.do(ctx, calls, s.inline(ctx))
}

// call is the script call of a decision for key under spec, of cost n in
// mode, sent at sent.
func (s *Store) call(ctx context.Context, alg *algorithm, key string, spec *driver.ValidSpec, n int64, mode driver.Mode, sent time.Time) *call {
	c := &call{alg: alg, keys: s.keys(key, spec), ctx: ctx,
		req: request{now: s.clockOf(sent), skew: s.skew, mode: mode}}
	c.req.parts = c.req.one[:0]
	if spec.NumParts() > 1 {
		c.req.parts = make([]part, 0, spec.NumParts())
	}
	c.req.appendParts(spec, n)
	return c
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
	if err := driver.CheckKey(key); err != nil {
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
func parseReply(spec *driver.ValidSpec, reply any) (driver.Decision, error) {
	var out [driver.MaxParts]driver.Outcome
	parts := out[:max(spec.NumParts(), 1)]
	if err := parseOutcomes(reply, parts); err != nil {
		return driver.Decision{}, err
	}
	return spec.Decision(parts), nil
}

// parseOutcomes reads a reply of four integers per policy into out, which
// has room for exactly its policies.
func parseOutcomes(reply any, out []driver.Outcome) error {
	fields, ok := reply.([]any)
	if !ok || len(fields) != 4*len(out) {
		return fmt.Errorf("%w: %v", errReply, reply)
	}
	var v [4]int64
	for i := range out {
		for j := range v {
			// Every value is an integer in [0, 2^53), allowed at most 2
			// (a charge met the debt's bound), and remaining above
			// −2^53 (a debt): anything else did not come from these
			// scripts.
			low := int64(0)
			if j == 1 {
				low = -(1<<53 - 1)
			}
			if v[j], ok = fields[4*i+j].(int64); !ok || v[j] < low || v[j] >= 1<<53 || j == 0 && v[j] > 2 {
				return fmt.Errorf("%w: %v", errReply, reply)
			}
		}
		out[i] = driver.Outcome{Allowed: v[0] == 1, Remaining: v[1], RetryAfter: v[2], ResetAfter: v[3], Capped: v[0] == 2}
	}
	return nil
}

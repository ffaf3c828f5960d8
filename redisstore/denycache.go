package redisstore

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper/driver"
)

const denyShards = 16

// denyCache remembers denials, so that a key denied until T is denied
// locally, without Redis, until T. It answers only the cost that was
// denied, for which RetryAfter is known, and only until then; this
// store's own takes, charges and refunds of the key drop its denial (see
// WithDenyCache for what that guarantees).
//
// A Reset adds allowance too, so a denial that Redis decided before a
// Reset must not be cached after it: each shard counts its Resets (its
// generation), and a denial is remembered only if no Reset of its shard
// ended while it was out. Resets are rare, so a count per shard, rather
// than per key, costs only the odd denial not cached.
type denyCache struct {
	seed     maphash.Seed
	perShard int
	shards   [denyShards]denyShard
	hits     atomic.Int64
}

type denyShard struct {
	mu      sync.Mutex
	gen     uint64 // Resets ended on this shard
	entries map[denyKey]denial
}

type denyKey struct {
	spec driver.SpecKey
	key  string
}

type denial struct {
	cost  int64
	at    time.Time // when the denied call was sent
	until time.Time // at + RetryAfter: the request may pass from then on
	d     driver.Decision
}

func newDenyCache(maxKeys int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), perShard: max(maxKeys/denyShards, 1)}
	for i := range c.shards {
		c.shards[i].entries = make(map[denyKey]denial)
	}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// lookup answers a request of cost n at now from a remembered denial. The
// answer's Remaining is the one Redis reported, and its times are aged
// by the time since. Without an answer, it returns key's shard's
// generation, for remember.
func (c *denyCache) lookup(spec *driver.ValidSpec, key string, n int64, now time.Time) (driver.Decision, uint64, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	d, ok := sh.entries[denyKey{spec.Key(), key}]
	gen := sh.gen
	sh.mu.Unlock()
	if !ok || d.cost != max(n, 1) || !now.Before(d.until) {
		return driver.Decision{}, gen, false
	}
	c.hits.Add(1)
	elapsed := int64(now.Sub(d.at) / time.Microsecond)
	res := d.d
	res.Outcome = aged(res.Outcome, elapsed)
	if res.Parts != nil { // an All's: each policy's, aged alike
		res.Parts = make([]driver.Outcome, len(d.d.Parts))
		for i, p := range d.d.Parts {
			res.Parts[i] = aged(p, elapsed)
		}
	}
	return res, gen, true
}

// aged is o as it stands elapsed microseconds later, nothing having been
// taken.
func aged(o driver.Outcome, elapsed int64) driver.Outcome {
	o.RetryAfter = max(o.RetryAfter-elapsed, 0)
	o.ResetAfter = max(o.ResetAfter-elapsed, o.RetryAfter)
	return o
}

// remember records a denial of cost n for a call sent at sent, unless a
// Reset on key's shard ended since gen was read (by lookup, before the
// call was sent): Redis may have decided the denial before that Reset.
func (c *denyCache) remember(spec *driver.ValidSpec, key string, n int64, sent time.Time, res driver.Decision, gen uint64) {
	sh := c.shard(key)
	k := denyKey{spec.Key(), key}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen {
		return
	}
	if _, ok := sh.entries[k]; !ok && len(sh.entries) >= c.perShard {
		// Full: drop the expired among a sample, and at least one.
		sampled := 0
		for other, d := range sh.entries { // random order: a fair sample
			if sampled == 0 || !sent.Before(d.until) {
				delete(sh.entries, other)
			}
			if sampled++; sampled == 16 {
				break
			}
		}
	}
	until := sent.Add(time.Duration(res.RetryAfter) * time.Microsecond)
	sh.entries[k] = denial{cost: max(n, 1), at: sent, until: until, d: res}
}

// drop drops key's denial under spec, after a take of another cost that
// made it too short. A take only ever lengthens a wait, so, unlike
// forget, it lets denials on their way be remembered.
func (c *denyCache) drop(spec *driver.ValidSpec, key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.entries, denyKey{spec.Key(), key})
	sh.mu.Unlock()
}

// forget drops key's denial under spec, once its state has been deleted
// in Redis, and keeps denials still on their way from being remembered.
func (c *denyCache) forget(spec *driver.ValidSpec, key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	sh.gen++
	delete(sh.entries, denyKey{spec.Key(), key})
	sh.mu.Unlock()
}

package redisstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// pipeliner sends a store's script calls through one queue per Redis
// server: over a cluster client, one per master, so that a decision
// waits only for the nodes that serve its keys. A batch waits for every
// node it reaches; were calls for different masters batched together,
// one master down or hung would hold up the decisions on all the others
// until their deadlines. Without auto-pipelining there is one queue,
// without a limit, which batches nothing.
type pipeliner struct {
	one     *queue               // over a client of one server, or unlimited
	cluster *redis.ClusterClient // else
	fn      *functions           // the cluster's queues'
	nodes   sync.Map             // a master's address: its *queue
	// routed: the cluster's slot map is loaded, so that finding a key's
	// master never waits for Redis again (go-redis then reloads it in the
	// background); loading: a look-up is loading it.
	routed, loading atomic.Bool
}

// newPipeliner returns the pipeliner of a store over client, with
// auto-pipelining or without.
func newPipeliner(client redis.UniversalClient, pipelining bool) *pipeliner {
	fn := newFunctions(client)
	if !pipelining {
		return &pipeliner{one: newQueue(client, fn, 0)}
	}
	if c, ok := client.(*redis.ClusterClient); ok {
		return &pipeliner{cluster: c, fn: fn}
	}
	return &pipeliner{one: newQueue(client, fn, maxFlying)}
}

// do sends calls through the queues of the servers of their keys (see
// queue.do), and returns when every call has its reply, or with ctx's
// error if ctx ends first. Calls for several masters (a DecideAll over
// several slots) go to each master's queue, at once.
func (p *pipeliner) do(ctx context.Context, calls []*call, inline bool) error {
	if p.one != nil {
		return p.one.do(ctx, calls, inline)
	}
	if len(calls) == 1 {
		return p.queueOf(ctx, calls[0], inline).do(ctx, calls, inline)
	}
	type share struct {
		q     *queue
		calls []*call
	}
	var shares []share
	for _, c := range calls {
		q := p.queueOf(ctx, c, inline)
		i := slices.IndexFunc(shares, func(s share) bool { return s.q == q })
		if i < 0 {
			i = len(shares)
			shares = append(shares, share{q: q})
		}
		shares[i].calls = append(shares[i].calls, c)
	}
	// Every share but the last on goroutines of their own, the last as
	// one call alone would go.
	var started []*call
	for _, s := range shares[:len(shares)-1] {
		s.q.start(ctx, s.calls)
		started = append(started, s.calls...)
	}
	last := shares[len(shares)-1]
	err := last.q.do(ctx, last.calls, inline)
	if err := waitAll(ctx, started); err != nil {
		return err
	}
	return err
}

// queueOf returns the queue of the master that serves c's keys. Until the
// cluster's slot map is first loaded, finding it may wait for Redis,
// which a caller whose ctx go-redis does not follow (not inline) must
// not: the map is then loaded in the background, and meanwhile the call
// goes through the queue of no master in particular, as every command
// waits for that map anyway.
func (p *pipeliner) queueOf(ctx context.Context, c *call, inline bool) *queue {
	if inline || p.routed.Load() {
		return p.lookup(ctx, c.keys[0])
	}
	if p.loading.CompareAndSwap(false, true) {
		go func() {
			defer p.loading.Store(false)
			p.lookup(context.Background(), c.keys[0])
		}()
	}
	return p.queueAt("")
}

// lookup returns the queue of key's master. Without a slot map (no master
// answered), it is the queue of no master in particular, whose calls meet
// go-redis's error.
func (p *pipeliner) lookup(ctx context.Context, key string) *queue {
	var addr string
	if m, err := p.cluster.MasterForKey(ctx, key); err == nil {
		addr = m.Options().Addr
		p.routed.Store(true)
	}
	return p.queueAt(addr)
}

// queueAt returns the queue of the master at addr, made on first use.
func (p *pipeliner) queueAt(addr string) *queue {
	if q, ok := p.nodes.Load(addr); ok {
		return q.(*queue)
	}
	q, _ := p.nodes.LoadOrStore(addr, newQueue(p.cluster, p.fn, maxFlying))
	return q.(*queue)
}

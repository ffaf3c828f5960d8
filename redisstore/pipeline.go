package redisstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// maxFlying is how many round trips may be in flight at once. Two let
// the client encode one batch while Redis runs the other.
const maxFlying = 2

// call is one script call on its way to Redis.
type call struct {
	alg  *algorithm
	keys []string
	args []any
	// ctx bounds a call sent alone until go-redis sends it (see
	// Store.Decide); a batch serves many callers, and ignores it.
	ctx context.Context
	// Written before done is closed; done is nil for a call that runs on
	// its caller's goroutine.
	reply any
	err   error
	done  chan struct{}
	// Set when the caller stopped waiting: a batch not yet sent skips it.
	abandoned atomic.Bool
}

// pipeliner coalesces concurrent script calls into pipelines, adding no
// delay: while fewer than maxFlying round trips are in flight a call is
// sent at once, alone; calls that arrive meanwhile are queued and sent
// together as one pipeline when a round trip returns. One goroutine makes
// one round trip per decision; many share one round trip per batch.
type pipeliner struct {
	client redis.UniversalClient

	mu     sync.Mutex
	flying int     // round trips in flight
	queue  []*call // calls waiting for the next one
	spare  []*call // the previous queue's array, for reuse
}

// do sends c at once, alone, when fewer than maxFlying round trips are in
// flight; else it queues c for the next batch. It returns c's reply, or
// ctx's error if ctx ends first. A call sent at once runs on the caller's
// goroutine when inline, else on a goroutine of its own (see
// Store.inline).
func (p *pipeliner) do(ctx context.Context, c *call, inline bool) (any, error) {
	p.mu.Lock()
	if p.flying >= maxFlying {
		c.done = make(chan struct{})
		p.queue = append(p.queue, c)
		p.mu.Unlock()
		return c.wait(ctx)
	}
	p.flying++
	p.mu.Unlock()
	if !inline {
		c.done = make(chan struct{})
		go p.flush([]*call{c})
		return c.wait(ctx)
	}
	c.run(ctx, p.client)
	if batch := p.next(); batch != nil {
		go p.flush(batch)
	}
	return c.reply, c.err
}

// next takes the queued calls, or marks the pipeliner idle if there are
// none.
func (p *pipeliner) next() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.flying--
		return nil
	}
	batch := p.queue
	p.queue, p.spare = p.spare[:0], nil
	return batch
}

// flush sends batches until the queue is empty.
func (p *pipeliner) flush(batch []*call) {
	for batch != nil {
		if len(batch) == 1 {
			batch[0].run(batch[0].ctx, p.client)
		} else {
			runBatch(p.client, batch)
		}
		for i, c := range batch {
			close(c.done)
			batch[i] = nil
		}
		p.mu.Lock()
		p.spare = batch[:0]
		p.mu.Unlock()
		batch = p.next()
	}
}

// run sends c alone: EVALSHA, and EVAL if the script is missing. go-redis
// bounds it by ctx only with ContextTimeoutEnabled, and otherwise by its
// own timeouts.
func (c *call) run(ctx context.Context, client redis.UniversalClient) {
	if !c.abandoned.Load() {
		c.reply, c.err = c.alg.script.Run(ctx, client, c.keys, c.args...).Result()
	}
}

// wait returns c's reply, or ctx's error if ctx ends first; the call may
// then still reach Redis, like any request whose answer was not awaited.
func (c *call) wait(ctx context.Context) (any, error) {
	select {
	case <-c.done:
		return c.reply, c.err
	case <-ctx.Done():
		c.abandoned.Store(true)
		return nil, ctx.Err()
	}
}

// runBatch sends calls as one pipeline of EVALSHA, then those that met
// NOSCRIPT (after a SCRIPT FLUSH, a restart or a failover) as EVAL, which
// loads the script. Errors stay per call. The batch serves callers with
// different deadlines, so it is bounded by the client's own timeouts.
func runBatch(client redis.UniversalClient, batch []*call) {
	ctx := context.Background()
	cmds := make([]*redis.Cmd, len(batch))
	pipe := client.Pipeline()
	for i, c := range batch {
		if !c.abandoned.Load() {
			cmds[i] = pipe.EvalSha(ctx, c.alg.script.Hash(), c.keys, c.args...)
		}
	}
	if pipe.Len() == 0 {
		return
	}
	pipe.Exec(ctx) // errors are read per command
	var retry []int
	for i, cmd := range cmds {
		if cmd != nil && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = client.Pipeline()
		for _, i := range retry {
			c := batch[i]
			cmds[i] = pipe.Eval(ctx, c.alg.src, c.keys, c.args...)
		}
		pipe.Exec(ctx)
	}
	for i, cmd := range cmds {
		if cmd != nil {
			batch[i].reply, batch[i].err = cmd.Result()
		}
	}
}

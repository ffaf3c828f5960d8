package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// maxFlying is how many round trips may be in flight at once. Two let
// the client encode one batch while Redis runs the other.
const maxFlying = 2

// maxCombined is the most requests one script call decides (see
// runBatch): about a millisecond of Redis's time, so that other clients'
// commands are not held back longer than by a pipeline.
const maxCombined = 128

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
	// combine: the requests of a batch under one algorithm go as one
	// script call (see runBatch). Only over a client of one server: in a
	// cluster, different callers' keys are in different slots, which one
	// script cannot touch.
	combine bool

	mu     sync.Mutex
	flying int     // round trips in flight
	queue  []*call // calls waiting for the next one
	spare  []*call // the previous queue's array, for reuse
}

func newPipeliner(client redis.UniversalClient) *pipeliner {
	_, single := client.(*redis.Client)
	return &pipeliner{client: client, combine: single}
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
			runBatch(p.client, batch, p.combine)
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
// loads the script. With combine, the calls of one algorithm go as one
// call of its batch script, so that Redis runs one script, and reads its
// clock once, for them all. Errors stay per call. The batch serves callers
// with different deadlines, so it is bounded by the client's own
// timeouts.
func runBatch(client redis.UniversalClient, batch []*call, combine bool) {
	ctx := context.Background()
	groups := groupCalls(batch, combine)
	cmds := make([]*redis.Cmd, len(groups))
	pipe := client.Pipeline()
	for i := range groups {
		g := &groups[i]
		cmds[i] = pipe.EvalSha(ctx, g.script.Hash(), g.keys, g.args...)
	}
	if pipe.Len() == 0 {
		return
	}
	pipe.Exec(ctx) // errors are read per command
	var retry []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = client.Pipeline()
		for _, i := range retry {
			g := &groups[i]
			cmds[i] = pipe.Eval(ctx, g.src, g.keys, g.args...)
		}
		pipe.Exec(ctx)
	}
	for i := range groups {
		groups[i].deliver(cmds[i])
	}
}

// group is one script call of a pipelined batch: a call of its own, or
// several calls of one algorithm combined into one call of its batch
// script.
type group struct {
	calls  []*call
	script *redis.Script
	src    string
	keys   []string
	args   []any
}

// groupCalls groups the calls not abandoned: with combine, those of each
// algorithm that has a batch script, when there are several, up to
// maxCombined a group; every other call alone.
func groupCalls(batch []*call, combine bool) []group {
	groups := make([]group, 0, len(batch))
	var byAlg []group // the calls of each algorithm, in the order they came
	for i, c := range batch {
		switch {
		case c.abandoned.Load():
		case combine && c.alg.batch != nil:
			j := slices.IndexFunc(byAlg, func(g group) bool { return g.calls[0].alg == c.alg && len(g.calls) < maxCombined })
			if j < 0 {
				j = len(byAlg)
				byAlg = append(byAlg, group{})
			}
			byAlg[j].calls = append(byAlg[j].calls, c)
		default: // a slice of batch: no allocation per call
			groups = append(groups, group{calls: batch[i : i+1], script: c.alg.script, src: c.alg.src, keys: c.keys, args: c.args})
		}
	}
	for _, same := range byAlg {
		calls, alg := same.calls, same.calls[0].alg
		if len(calls) == 1 {
			c := calls[0]
			groups = append(groups, group{calls: calls, script: alg.script, src: alg.src, keys: c.keys, args: c.args})
			continue
		}
		// ARGV: the slack, then each call's cost, time and parameters
		// (batch.lua).
		g := group{calls: calls, script: alg.batch, src: alg.batchSrc,
			keys: make([]string, len(calls)), args: make([]any, 0, 1+len(calls)*5)}
		g.args = append(g.args, calls[0].args[2])
		for i, c := range calls {
			g.keys[i] = c.keys[0]
			g.args = append(g.args, c.args[0], c.args[1])
			g.args = append(g.args, c.args[3:]...)
		}
		groups = append(groups, g)
	}
	return groups
}

// deliver hands each call of g its reply from cmd, or its error.
func (g *group) deliver(cmd *redis.Cmd) {
	reply, err := cmd.Result()
	if len(g.calls) == 1 {
		g.calls[0].reply, g.calls[0].err = reply, err
		return
	}
	replies, ok := reply.([]any)
	if err == nil && (!ok || len(replies) != len(g.calls)) {
		err = fmt.Errorf("%w: %v", errReply, reply)
	}
	for i, c := range g.calls {
		if err != nil {
			c.err = err
			continue
		}
		if e, ok := replies[i].(error); ok {
			c.err = e
		} else {
			c.reply = replies[i]
		}
	}
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	req  request // what it decides, from which its ARGV is built
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

// finished reports whether c is done: its reply and error are written,
// or it was abandoned unsent (both left zero). A call without a done
// channel ran on its caller's goroutine, if at all.
func (c *call) finished() bool {
	if c.done == nil {
		return true
	}
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// queue sends script calls to one Redis server, by the end of their
// callers' contexts. With a limit of round trips in flight, it coalesces
// concurrent calls into pipelines, adding no delay: while fewer than
// limit round trips are in flight a call is sent at once, alone; calls
// that arrive meanwhile are queued and sent together as one pipeline when
// a round trip returns. One goroutine makes one round trip per decision;
// many share one round trip per batch. Without a limit (auto-pipelining
// off), every decision is a round trip of its own. A pipeliner has one
// queue per server (see pipeliner).
type queue struct {
	client redis.UniversalClient
	fn     *functions // the store's, shared by its queues
	limit  int        // round trips in flight at most; 0 for no limit
	// combine: the requests of a batch under one algorithm go as one
	// script call (see runBatch). Only over a client of one server: in a
	// cluster, different callers' keys are in different slots, which one
	// script cannot touch. A plain client of a cluster node learns so
	// from the first CROSSSLOT, and stops.
	combine atomic.Bool

	mu      sync.Mutex
	flying  int     // round trips in flight, under a limit
	waiting []*call // calls waiting for the next one
	spare   []*call // the previous batch's array, for reuse
}

func newQueue(client redis.UniversalClient, fn *functions, limit int) *queue {
	q := &queue{client: client, fn: fn, limit: limit}
	_, single := client.(*redis.Client)
	q.combine.Store(single && limit > 0)
	return q
}

// do sends calls (a decision's: one script call, or several in one
// pipeline) at once, or queues them for the next batch while limit round
// trips are in flight. It returns when every call has its reply, or with
// ctx's error if ctx ends first. Calls sent at once run on the caller's
// goroutine when inline, else on a goroutine of their own (see
// Store.inline).
func (q *queue) do(ctx context.Context, calls []*call, inline bool) error {
	if !inline {
		q.start(ctx, calls)
		return waitAll(ctx, calls)
	}
	if !q.reserve(calls) {
		return waitAll(ctx, calls)
	}
	runCalls(ctx, q.client, q.fn, calls)
	if batch := q.next(); batch != nil {
		go q.flush(context.Background(), batch)
	}
	return nil
}

// start sends calls on a goroutine of their own, bounded by ctx, or
// queues them, and returns at once: their done channels close when they
// have their replies. It is the one hand-off of a call to another
// goroutine.
func (q *queue) start(ctx context.Context, calls []*call) {
	for _, c := range calls {
		c.done = make(chan struct{})
	}
	if q.reserve(calls) {
		go q.flush(ctx, slices.Clone(calls)) // flush reuses its batch's array
	}
}

// reserve counts a round trip in flight for calls, and reports true, if
// the limit allows one; else it queues calls for the next batch, their
// done channels made.
func (q *queue) reserve(calls []*call) bool {
	if q.limit == 0 {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flying < q.limit {
		q.flying++
		return true
	}
	for _, c := range calls {
		if c.done == nil {
			c.done = make(chan struct{})
		}
	}
	q.waiting = append(q.waiting, calls...)
	return false
}

// next takes the queued calls, or ends a round trip in flight if there
// are none.
func (q *queue) next() []*call {
	if q.limit == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.flying--
		return nil
	}
	batch := q.waiting
	q.waiting, q.spare = q.spare[:0], nil
	return batch
}

// flush sends batch, bounded by ctx, then the queued batches, bounded by
// the client's own timeouts (they serve many callers), until the queue is
// empty.
func (q *queue) flush(ctx context.Context, batch []*call) {
	for ; batch != nil; ctx = context.Background() {
		if len(batch) == 1 {
			batch[0].run(batch[0].ctx, q.client, q.fn)
		} else {
			if runBatch(ctx, q.client, q.fn, batch, q.combine.Load()) {
				q.combine.Store(false)
			}
		}
		for i, c := range batch {
			close(c.done)
			batch[i] = nil
		}
		if q.limit > 0 {
			q.mu.Lock()
			q.spare = batch[:0]
			q.mu.Unlock()
		}
		batch = q.next()
	}
}

// run sends c alone: FCALL (see functions), and EVAL if the function is
// missing, or, without functions, EVALSHA, and EVAL if the script is
// missing; each reaching Redis at most once (see onceCmd and
// retryUnsent). go-redis bounds it by ctx only with
// ContextTimeoutEnabled, and otherwise by its own timeouts.
func (c *call) run(ctx context.Context, client redis.UniversalClient, fn *functions) {
	if c.abandoned.Load() {
		return
	}
	var cmd *redis.Cmd
	args := c.args()
	send := func(f form) {
		retryUnsent(ctx, func() error {
			cmd = scriptCmd(ctx, f, c.alg.script, c.keys, args)
			return client.Process(ctx, onceCmd{cmd})
		})
	}
	f := fn.first()
	send(f)
	if f == fcall && fn.missing(ctx, client, cmd.Err(), c.alg.script, c.keys[0]) {
		f = evalsha
		send(evalsha)
	}
	if f == evalsha && isNoScript(cmd.Err()) {
		send(eval)
	}
	c.reply, c.err = cmd.Result()
	if c.err != nil {
		c.err = withContextErr(ctx, c.err)
	}
}

// withContextErr adds ctx's error to err, from a call that ended with
// ctx: a read cut at ctx's deadline (with ContextTimeoutEnabled) fails
// with a network timeout, which may come a moment before ctx says it
// is done.
func withContextErr(ctx context.Context, err error) error {
	ctxErr := ctx.Err()
	if deadline, ok := ctx.Deadline(); ctxErr == nil && ok && !time.Now().Before(deadline) {
		ctxErr = context.DeadlineExceeded
	}
	if ctxErr == nil || errors.Is(err, ctxErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ctxErr, err)
}

// runCalls sends calls: one alone, several as one pipeline (see
// runBatch), bounded by ctx as the client bounds commands.
func runCalls(ctx context.Context, client redis.UniversalClient, fn *functions, calls []*call) {
	if len(calls) == 1 {
		calls[0].run(ctx, client, fn)
		return
	}
	runBatch(ctx, client, fn, calls, false)
}

// waitAll waits until every call has its reply, or returns ctx's error if
// ctx ends first; the calls may then still reach Redis, like any request
// whose answer was not awaited.
func waitAll(ctx context.Context, calls []*call) error {
	for _, c := range calls {
		select {
		case <-c.done:
		case <-ctx.Done():
			for _, c := range calls {
				c.abandoned.Store(true)
			}
			return ctx.Err()
		}
	}
	return nil
}

// runBatch sends calls as one pipeline of FCALL, then those that met a
// missing function as EVALSHA, once the library is loaded (see
// functions), then those that met NOSCRIPT (after a SCRIPT FLUSH, a
// restart or a failover) as EVAL, which loads the script. With combine, the calls of one algorithm go as one
// call of its batch script, so that Redis runs one script, and reads its
// clock once, for them all. Errors stay per call. A batch of queued calls
// serves callers with different deadlines: it is given no ctx of theirs,
// and is bounded by the client's own timeouts (see queue.flush).
//
// A plain client of a Redis Cluster node refuses a combined call whose
// keys lie in different slots (CROSSSLOT), before running it: its calls
// are then sent again, each alone, and runBatch reports it, so that the
// caller stops combining.
func runBatch(ctx context.Context, client redis.UniversalClient, fn *functions, batch []*call, combine bool) (crossSlot bool) {
	groups := groupCalls(batch, combine)
	cmds := execGroups(ctx, client, fn, groups)
	var split []group
	for i := range groups {
		if len(groups[i].calls) > 1 && hasErrorPrefix(cmds[i].Err(), "CROSSSLOT") {
			split = append(split, groupCalls(groups[i].calls, false)...)
			continue
		}
		groups[i].deliver(cmds[i])
	}
	if len(split) > 0 {
		for i, cmd := range execGroups(ctx, client, fn, split) {
			split[i].deliver(cmd)
		}
	}
	return len(split) > 0
}

// execGroups sends groups as one pipeline, each script call reaching
// Redis at most once (see onceCmd and retryUnsent), then those that met
// a missing function as EVALSHA, and those that met NOSCRIPT as EVAL,
// and returns their commands.
func execGroups(ctx context.Context, client redis.UniversalClient, fn *functions, groups []group) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(groups))
	send := func(which []int, f form) {
		retryUnsent(ctx, func() error {
			pipe := client.Pipeline()
			for _, i := range which {
				g := &groups[i]
				cmds[i] = scriptCmd(ctx, f, g.script, g.keys, g.args)
				pipe.Process(ctx, onceCmd{cmds[i]})
			}
			_, err := pipe.Exec(ctx) // errors are read per command
			return err
		})
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	if len(all) == 0 {
		return cmds
	}
	f := fn.first()
	send(all, f)
	if f == fcall {
		var retry []int
		for i, cmd := range cmds {
			if fn.missing(ctx, client, cmd.Err(), groups[i].script, groups[i].keys[0]) {
				retry = append(retry, i)
			}
		}
		if len(retry) > 0 {
			send(retry, evalsha)
		}
	}
	var retry []int
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		send(retry, eval)
	}
	return cmds
}

// group is one script call of a pipelined batch: a call of its own, or
// several calls of one algorithm combined into one call of its batch
// script.
type group struct {
	calls  []*call
	script *script
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
			groups = append(groups, group{calls: batch[i : i+1], script: c.alg.script, keys: c.keys, args: c.args()})
		}
	}
	for _, same := range byAlg {
		calls, alg := same.calls, same.calls[0].alg
		if len(calls) == 1 {
			c := calls[0]
			groups = append(groups, group{calls: calls, script: alg.script, keys: c.keys, args: c.args()})
			continue
		}
		g := group{calls: calls, script: alg.batch,
			keys: make([]string, len(calls)), args: batchArgs(calls)}
		for i, c := range calls {
			g.keys[i] = c.keys[0]
		}
		groups = append(groups, g)
	}
	return groups
}

// deliver hands each call of g its reply from cmd, or its error. A
// batch's reply is flat, four values per call (batch.lua).
func (g *group) deliver(cmd *redis.Cmd) {
	reply, err := cmd.Result()
	if len(g.calls) == 1 {
		g.calls[0].reply, g.calls[0].err = reply, err
		return
	}
	replies, ok := reply.([]any)
	if err == nil && (!ok || len(replies) != 4*len(g.calls)) {
		err = fmt.Errorf("%w: %v", errReply, reply)
	}
	for i, c := range g.calls {
		if err != nil {
			c.err = err
			continue
		}
		// A request's failure is a string (batch.lua): no client reads
		// it as an error reply, which go-redis would stop the array at.
		if msg, ok := replies[4*i].(string); ok {
			c.err = replyError(msg)
		} else {
			c.reply = replies[4*i : 4*i+4 : 4*i+4]
		}
	}
}

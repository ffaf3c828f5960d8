package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is a request's failure inside a batch script's reply (see
// batch.lua), such as "OOM command not allowed..." or "READONLY You
// can't write...". It is a redis.Error, like the error of a script call
// sent alone, so redis.HasErrorPrefix(err, "OOM") matches either.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks replyError as an error reply from Redis (redis.Error).
func (replyError) RedisError() {}

var _ redis.Error = replyError("")

// onceCmd is a script call that go-redis sends at most once. go-redis
// otherwise sends a command again after a read timeout or a dropped
// connection (MaxRetries), and a pipeline again when its first reply is
// LOADING, READONLY, MASTERDOWN and the like; a script that already ran
// would then run twice, and take its cost twice. NoRetry is go-redis's
// switch for commands that must not be repeated: a call that fails so
// returns its error instead. go-redis still repeats a command that never
// ran: a cluster's MOVED and ASK redirections, and READONLY from a
// former primary; redisstore repeats one that never left (retryUnsent).
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis never to send the command again.
func (onceCmd) NoRetry() bool { return true }

// scriptCmd builds EVALSHA (evalsha true, with the script's hash) or EVAL
// (with its source) of keys and args, as go-redis's Script does.
func scriptCmd(ctx context.Context, evalsha bool, script *redis.Script, src string, keys []string, args []any) *redis.Cmd {
	v := make([]any, 0, 3+len(keys)+len(args))
	if evalsha {
		v = append(v, "evalsha", script.Hash(), len(keys))
	} else {
		v = append(v, "eval", src, len(keys))
	}
	for _, k := range keys {
		v = append(v, k)
	}
	v = append(v, args...)
	cmd := redis.NewCmd(ctx, v...)
	cmd.SetFirstKeyPos(3) // the first key, for a cluster's routing
	return cmd
}

// isNoScript reports whether err says Redis lacks the script (after a
// SCRIPT FLUSH, a restart or a failover): it did not run.
func isNoScript(err error) bool { return hasErrorPrefix(err, "NOSCRIPT") }

// hasErrorPrefix is redis.HasErrorPrefix, which allocates even for a nil
// error: this is asked of every call.
func hasErrorPrefix(err error, prefix string) bool {
	return err != nil && redis.HasErrorPrefix(err, prefix)
}

// unsentRetries is how many times retryUnsent sends a call again, as
// go-redis would (MaxRetries is 3 by default).
const unsentRetries = 3

// retryUnsent runs send, and again, after go-redis's backoff (8 ms plus
// up to 16, 32, then 64 ms), while it fails with an error that says nothing
// was sent: no connection could be had. That is what go-redis retries
// for any command, and safe: the script never reached Redis. It keeps a
// call from failing on a dial error that go-redis's pool repeats for a
// while after Redis returns, when a connection of the pool is about to
// be free.
func retryUnsent(ctx context.Context, send func() error) {
	for attempt := 0; ; attempt++ {
		if err := send(); err == nil || attempt == unsentRetries || !isDialError(err) {
			return
		}
		const minBackoff = 8 * time.Millisecond // go-redis's MinRetryBackoff
		t := time.NewTimer(minBackoff + rand.N(minBackoff<<(attempt+1)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// isDialError reports whether err is a failure to connect: a function of
// its own, so that errors.As's target is allocated only for an error.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
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

// form is how a script is sent: the command that runs it.
type form uint8

const (
	fcall   form = iota // its library's function, loaded once
	evalsha             // the script by its hash, cached by Redis
	eval                // the script itself, which Redis then caches
)

// scriptCmd builds the command of form that runs s with keys and args.
func scriptCmd(ctx context.Context, f form, s *script, keys []string, args []any) *redis.Cmd {
	v := make([]any, 0, 3+len(keys)+len(args))
	switch f {
	case fcall:
		v = append(v, "fcall", s.fn, len(keys))
	case evalsha:
		v = append(v, "evalsha", s.sha.Hash(), len(keys))
	default:
		v = append(v, "eval", s.src, len(keys))
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

// isNoFunction reports whether err says Redis lacks the function (a new
// server, or after FUNCTION FLUSH or DELETE): it did not run.
func isNoFunction(err error) bool { return replySays(err, "Function not found") }

// refusesFunctions reports whether err says Redis will not run functions
// for this client: a server older than 7 (FCALL is an unknown command),
// or an ACL that denies FCALL or FUNCTION LOAD. Nothing ran.
func refusesFunctions(err error) bool {
	return hasErrorPrefix(err, "NOPERM") ||
		replySays(err, "unknown command") && strings.Contains(strings.ToLower(err.Error()), "fcall")
}

// replySays reports whether err is an error reply from Redis that says
// what.
func replySays(err error, what string) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(reply.Error(), what)
}

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

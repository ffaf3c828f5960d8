// Package faults holds the tests of how ratekeeper behaves when Redis
// fails under load, each against a private redis-server that it kills,
// restarts empty, pauses or strips of its scripts:
//
//   - Redis killed and restarted: every call, direct or through
//     httplimit, returns within its deadline; while Redis is down the
//     middleware gives its fail-open or fail-closed answer and direct
//     calls return errors; decisions resume within a second of Redis
//     answering again; no goroutine outlives the load.
//   - Redis killed under load from calls without a deadline, with a long
//     one, and the middleware: once a call has failed, the others fail
//     within milliseconds, with redisstore.ErrUnreachable, and decisions
//     resume within a second of Redis's return; the test logs the median
//     time to fail and the time to recover.
//   - SCRIPT FLUSH, over and over, under load: no error, and every key
//     admits exactly its limit, for every algorithm.
//   - CLIENT PAUSE: calls give up at their context's deadline, with or
//     without go-redis's own context timeouts and auto-pipelining, and
//     the middleware at its store timeout.
//   - Redis restarted empty: a key starts again full, without an error,
//     for every algorithm.
//   - Writes refused, out of memory under noeviction (OOM) or by a
//     replica (READONLY), under mixed load: every request gets its own
//     answer, pipelined or not; no drained key is allowed.
//   - One master of a 3-master Cluster killed or paused: the calls on the
//     other masters' keys, by Allow and DecideAll, meet their deadlines;
//     the test logs their p99 and the dead keys' time to fail.
//   - Redis stalled for longer than the client's ReadTimeout, under
//     go-redis's default retries: no script runs more than once.
//
// The package has no code of its own; it runs with the other tests under
// `make test`, and skips without a test Redis.
package faults

// Package conformance holds the test suite that every ratekeeper.Store
// must pass, run against memstore and redisstore alike.
//
// It guarantees that, for every policy it lists:
//
//   - scripted scenarios give exact Results (Remaining, RetryAfter and
//     ResetAfter to the microsecond) on every store;
//   - the Lua script, memstore and the Go model (driver.ValidSpec.Step) return
//     identical Results over long random sequences of costs and time
//     steps under a controlled clock;
//   - forgetting a key once its ResetAfter has passed, as expiry does,
//     never changes a later decision, and keys do expire;
//   - goroutines and processes racing on one key are admitted exactly as
//     far as the policy allows, never one more;
//   - a clock that steps back admits no more in real time than the
//     policy's bound, every store deciding as the model across it, and a
//     time outside the supported range is an error;
//   - Result.Remaining means one thing in every algorithm: the most that
//     would pass now.
//
// A new algorithm joins by adding its policies to the tables in
// conformance_test.go and concurrency_test.go, and its own scripted
// scenarios in a file of its own, as tokenbucket_test.go does.
package conformance

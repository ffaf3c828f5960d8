// Package bench measures ratekeeper against other rate limiters for Go.
// It is a module of its own, so that the peers' dependencies never reach
// ratekeeper's users.
//
// The in-process comparison is a Go benchmark in this package:
//
//	go test -run '^$' -bench . -benchmem -count 5 .
//
// The Redis comparison is the load generator cmd/loadgen. The rate limit
// service is compared with envoyproxy/ratelimit over gRPC by
// cmd/rlsload, with cmd/noop-rls, a service that answers OK without
// deciding, as the ceiling; scripts/bench-service.sh runs them all. See
// docs/performance.md in the repository for the method and the results.
package bench

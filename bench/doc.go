// Package bench measures ratekeeper against other rate limiters for Go.
// It is a module of its own, so that the peers' dependencies never reach
// ratekeeper's users.
//
// The in-process comparison is a Go benchmark in this package:
//
//	go test -run '^$' -bench . -benchmem -count 5 .
//
// The Redis comparison is the load generator cmd/loadgen; see
// docs/performance.md in the repository for the method and the results.
package bench

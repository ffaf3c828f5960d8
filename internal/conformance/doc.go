// Package conformance runs the conformance suite of every store
// (driver/drivertest) on redisstore, over one server and over a Redis
// Cluster, and holds the tests that need the stores themselves rather
// than any Store:
//
//   - DecideAll, all or nothing over several keys, on memstore and Redis
//     alike over random batches;
//   - goroutines and processes racing on one key are admitted exactly as
//     far as the policy allows, never one more;
//   - Redis keys expire once full, a denied request writes nothing, and
//     memstore frees a key once full;
//   - over a Cluster, keys spread across slots, and one caller's keys
//     share one;
//   - Sentinel failover clients work.
//
// A new algorithm joins the suite in driver/drivertest: its policies in
// the tables of policies.go, and its own scripted scenarios in a file of
// its own, as tokenbucket.go does.
package conformance

// Package envoydiff holds the differential test of ratekeeper-server
// against envoyproxy/ratelimit, which it replaces: both run as processes
// on one Redis and one configuration, the same requests go to both over
// gRPC and POST /json, and their answers are compared field by field.
//
// A small model of each service's counters predicts its answers, so each
// service is checked against its own model on every request, and the two
// against each other wherever the models agree. The models differ where
// ratekeeper-server differs by design: a denied request takes nothing
// from any of its descriptors (envoy counts every descriptor's hits,
// denied or not), and a descriptor's limit override is counted by its
// value (envoy shares one counter among every override of the same
// entries and unit). Tests named after each difference pin both
// services' answers.
//
// The package has tests only. They need Redis (RATEKEEPER_REDIS_ADDR, as
// `make test` sets it) and build envoyproxy/ratelimit from the Go module
// proxy on first use (see package envoytest).
package envoydiff

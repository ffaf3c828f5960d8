// Package soak holds long-running tests, against a real Redis, that the
// faster tests cannot stand in for: every algorithm hammered by many
// clients on many keys, with every admitted request checked against the
// most an exact limiter could have admitted, and the demo server under
// sustained HTTP load, with its memory watched.
//
// The package has no code of its own. `make test` runs the tests for a
// few seconds each, `make soak` for minutes; RATEKEEPER_SOAK_DURATION (per
// algorithm) and RATEKEEPER_SOAK_LOAD_DURATION (the demo) set the lengths.
package soak

// Package server is ratekeeper's rate limit service: it answers Envoy's
// rate limit service API (envoy.service.ratelimit.v3) and plain HTTP
// callers from a configuration in envoyproxy/ratelimit's format, deciding
// with a ratekeeper store.
package server

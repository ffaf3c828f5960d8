// Package integration holds envoyproxy/ratelimit's own integration tests
// (test/integration at the version server/internal/envoytest pins, Apache
// License 2.0), run against ratekeeper-server instead of envoy's service.
//
// The test files are envoy's, unchanged but for:
//   - the imports of envoy's settings, utils and test/common, which are
//     copies here (settings/, utils/, common/), and of its runner, which
//     package runner replaces: ratekeeper-server started as a subprocess
//     with no arguments and the environment the test's settings stand for;
//   - startTestRunner's body, which calls runner.Start;
//   - defaultSettings' fixed listener ports, which are free ports;
//   - no integration build tag, and no memcached import.
//
// Their assertions are as written. Package fixture starts what envoy's
// Makefile starts before the tests (Redis over TLS, a Cluster, Sentinel) on
// free loopback ports; runner.Start skips the exempt cases (memcached,
// envoy's local cache, statsd tags), each with its reason. The
// configuration files under runtime/ are envoy's.
package integration

package runner

import "os"

// EnvAll names an environment variable that, set to 1, runs the pending
// cases too.
const EnvAll = "RATEKEEPER_ENVOYIT_ALL"

// pendingCases are envoy's cases that ratekeeper-server does not pass
// yet, each with why; they skip unless EnvAll is 1, so that the others
// guard what passes. It is empty: every case that is not exempt passes,
// those of a request denied by one of two descriptors included, since
// the service started with no arguments counts hits as envoy does.
var pendingCases = map[string]string{}

// pending returns why the case name does not pass yet, if it does not.
func pending(name string) (string, bool) {
	reason, ok := pendingCases[name]
	if !ok || os.Getenv(EnvAll) == "1" {
		return "", false
	}
	return "pending: " + reason + " (" + EnvAll + "=1 runs it)", true
}

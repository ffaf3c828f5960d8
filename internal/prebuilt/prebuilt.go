// Package prebuilt hands tests the binaries that make test builds once per
// run (scripts/with-binaries.sh), so that no test binary builds them
// again. Each is named by an environment variable; a test whose variable
// is unset, as under a plain go test, builds the binary itself.
//
//   - RATEKEEPER_SERVER_BIN: ratekeeper-server built by the Dockerfile's
//     own go build command (no race detector, no cgo, -trimpath);
//   - RATEKEEPER_SERVER_RACE_BIN: ratekeeper-server built with -race;
//   - RATEKEEPER_DEMO_BIN: ratekeeper-demo built without -race;
//   - RATEKEEPER_DEMO_RACE_BIN: ratekeeper-demo built with -race.
//
// Lookup checks that the file a variable names is the Go binary of the
// package the test expects, with or without the race detector as it
// expects, so that a wrong or stale path is an error rather than a test
// of something else.
package prebuilt

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
)

// The environment variables that hold the binaries' paths.
const (
	ServerEnv     = "RATEKEEPER_SERVER_BIN"
	ServerRaceEnv = "RATEKEEPER_SERVER_RACE_BIN"
	DemoEnv       = "RATEKEEPER_DEMO_BIN"
	DemoRaceEnv   = "RATEKEEPER_DEMO_RACE_BIN"
)

// The main packages of the binaries.
const (
	ServerPackage = "github.com/ratekeeper/ratekeeper/server/cmd/ratekeeper-server"
	DemoPackage   = "github.com/ratekeeper/ratekeeper/cmd/ratekeeper-demo"
)

// Server returns the prebuilt ratekeeper-server with or without the race
// detector, as Lookup does.
func Server(race bool) (path string, info *debug.BuildInfo, err error) {
	if race {
		return Lookup(ServerRaceEnv, ServerPackage, true)
	}
	return Lookup(ServerEnv, ServerPackage, false)
}

// Demo returns the prebuilt ratekeeper-demo with or without the race
// detector, as Lookup does.
func Demo(race bool) (path string, info *debug.BuildInfo, err error) {
	if race {
		return Lookup(DemoRaceEnv, DemoPackage, true)
	}
	return Lookup(DemoEnv, DemoPackage, false)
}

// Lookup returns the path held by the environment variable env and the
// build information of the binary there. It returns "" and no error when
// env is unset or empty: the caller then builds the binary itself. It is
// an error if the file is not a Go binary, or not one of the main package
// pkg, or was built with the race detector when race is false or without
// it when race is true.
func Lookup(env, pkg string, race bool) (path string, info *debug.BuildInfo, err error) {
	path = os.Getenv(env)
	if path == "" {
		return "", nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", env, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", nil, fmt.Errorf("%s: %s is not an executable file", env, path)
	}
	info, err = buildinfo.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %s: %w", env, path, err)
	}
	if info.Path != pkg {
		return "", nil, fmt.Errorf("%s: %s is a build of %q, not of %s", env, path, info.Path, pkg)
	}
	if got := Race(info); got != race {
		return "", nil, fmt.Errorf("%s: %s: built with the race detector: %t, want %t", env, path, got, race)
	}
	return path, info, nil
}

// Race reports whether info is that of a binary built with -race.
func Race(info *debug.BuildInfo) bool {
	v, _ := Setting(info, "-race")
	return v == "true"
}

// Setting returns the value of the build setting key of info (as go
// version -m lists them: "-trimpath", "-ldflags", "CGO_ENABLED", ...), and
// whether info has it.
func Setting(info *debug.BuildInfo, key string) (string, bool) {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value, true
		}
	}
	return "", false
}

// Self returns the build information of the running binary, such as a
// test binary, which says whether it has the race detector.
func Self() (*debug.BuildInfo, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, errors.New("the running binary has no build information")
	}
	return info, nil
}

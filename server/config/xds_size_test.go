package config

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// TestFromXDSMemoryLikeFile checks that a push costs about the memory of
// the same rules read from a file: the bytes allocated to decode the
// resources and build their configuration are within 1.2 times those
// allocated to read and build the YAML file they stand for.
func TestFromXDSMemoryLikeFile(t *testing.T) {
	const n = 20_000
	var text strings.Builder
	text.WriteString("domain: big\ndescriptors:\n")
	res := &rlsconfv3.RateLimitConfig{Name: "big", Domain: "big"}
	for i := range n {
		user := &rlsconfv3.RateLimitDescriptor{Key: "user", Value: fmt.Sprintf("u%d", i),
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 5}}
		fmt.Fprintf(&text, "  - key: user\n    value: u%d\n    rate_limit:\n      unit: hour\n      requests_per_unit: 5\n", i)
		if i%10 == 0 {
			// One in ten nests a level, with a named rule.
			user.Descriptors = []*rlsconfv3.RateLimitDescriptor{{Key: "path", Value: "/login",
				RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 2, Name: fmt.Sprintf("login%d", i)}}}
			fmt.Fprintf(&text, "    descriptors:\n      - key: path\n        value: /login\n        rate_limit: {unit: minute, requests_per_unit: 2, name: login%d}\n", i)
		}
		res.Descriptors = append(res.Descriptors, user)
	}
	wire, err := proto.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.yaml")
	write(t, path, text.String())

	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	var fromFile, pushed *Config
	fileBytes := allocated(func() {
		if fromFile, err = Load(path); err != nil {
			t.Fatal(err)
		}
	})
	xdsBytes := allocated(func() {
		var r rlsconfv3.RateLimitConfig
		if err := proto.Unmarshal(wire, &r); err != nil {
			t.Fatal(err)
		}
		if pushed, err = FromXDS([]*rlsconfv3.RateLimitConfig{&r}); err != nil {
			t.Fatal(err)
		}
	})
	if got, want := len(pushed.Rules("big")), len(fromFile.Rules("big")); got != want || got != n+n/10 {
		t.Fatalf("%d rules pushed, %d from the file, want %d", got, want, n+n/10)
	}
	ratio := float64(xdsBytes) / float64(fileBytes)
	t.Logf("%d descriptors: the file (%d bytes) allocates %d MiB, the push (%d bytes) %d MiB: %.2f times",
		n+n/10, text.Len(), fileBytes>>20, len(wire), xdsBytes>>20, ratio)
	if ratio > 1.2 {
		t.Errorf("a push allocates %.2f times the memory of the same rules from a file, want at most 1.2", ratio)
	}
}

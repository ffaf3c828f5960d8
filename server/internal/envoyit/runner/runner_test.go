package runner

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/fixture"
	"github.com/ratekeeper/ratekeeper/server/internal/envoyit/settings"
)

// The environment reads back, through envoy's own envconfig, as the
// settings it came from, but for the rewritten addresses.
func TestEnvironRoundTrip(t *testing.T) {
	var s settings.Settings
	if err := envconfig.Process("UNLIKELY_PREFIX_", &s); err != nil {
		t.Fatal(err)
	}
	s.RedisUrl = "mymaster,localhost:26394,localhost:26395"
	s.ExtraTags = map[string]string{"foo": "bar", "a": "b"}
	s.MemcacheHostPort = []string{"localhost:6394", "localhost:6395"}
	s.RedisPipelineWindow = 150 * time.Microsecond
	s.NearLimitRatio = 0.75
	s.TracingSamplingRate = 0.25
	s.StopCacheKeyIncrementWhenOverlimit = true
	fixture.Map(26395, 40000)
	defer fixture.Unmap(26395)

	env := Environ(s)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var got settings.Settings
	if err := envconfig.Process("", &got); err != nil {
		t.Fatalf("envconfig refuses the environment: %v\n%s", err, strings.Join(env, "\n"))
	}
	want := s
	want.RedisUrl = "mymaster,localhost:26394,localhost:40000"
	want.Host, want.GrpcHost, want.DebugHost = "127.0.0.1", "127.0.0.1", "127.0.0.1"
	want.PrometheusAddr = "127.0.0.1:9090"
	v, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Tag.Get("envconfig") == "" {
			continue
		}
		if !same(v.Field(i), w.Field(i)) {
			t.Errorf("%s: read back %#v, want %#v", f.Name, v.Field(i).Interface(), w.Field(i).Interface())
		}
	}
}

// same compares two values of a field, an empty map or slice as a nil one
// (envconfig reads an empty variable as empty, its empty default as nil).
func same(a, b reflect.Value) bool {
	if k := a.Kind(); (k == reflect.Map || k == reflect.Slice) && a.Len() == 0 && b.Len() == 0 {
		return true
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestMain removes what package fixture made for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	fixture.Stop()
	os.Exit(code)
}

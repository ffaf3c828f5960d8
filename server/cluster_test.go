package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/server/config"
)

// TestPartlyAppliedOnACluster: on a Redis Cluster with a master down, a
// request whose descriptors lie on that master and on a live one fails
// (503), but the live master's descriptor has taken its hits, as
// docs/service.md says a caller must assume; each such request is counted
// in ratekeeper_server_store_partly_applied_errors_total. A request that
// changed nothing is not: one on the dead master alone, and one the live
// master denied.
func TestPartlyAppliedOnACluster(t *testing.T) {
	awayFromTheHour(t)
	cluster := redistest.StartCluster(t, 3)
	m := NewMetrics(prometheus.NewRegistry())
	svc := newService(t, redisstore.New(cluster.Client(redis.ClusterOptions{})), `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10000}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10000}
`, Options{Metrics: m, StoreTimeout: 200 * time.Millisecond})
	srv := httptest.NewServer(HTTPHandler(svc, nil, nil))
	t.Cleanup(srv.Close)

	// A user on master 0, which is stopped, and one on master 1; a trial
	// on master 0.
	on := func(key string, master int) string {
		for i := 0; ; i++ {
			v := fmt.Sprint("v", i)
			if cluster.MasterOf("{"+stateKey("test", []config.Entry{{Key: key, Value: v}})+"}") == master {
				return v
			}
		}
	}
	dead, live, deadTrial := on("user", 0), on("user", 1), on("trial", 0)
	post := func(body string) (int, DecideResponse) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/decide", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out DecideResponse
		if resp.StatusCode != http.StatusServiceUnavailable {
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
			}
		}
		return resp.StatusCode, out
	}
	descriptor := func(user string, hits int, mode string) string {
		return fmt.Sprintf(`{"entries":[{"key":"user","value":%q}],"hits":%d,"mode":%q}`, user, hits, mode)
	}
	trial := fmt.Sprintf(`{"entries":[{"key":"trial","value":%q}]}`, deadTrial)
	request := func(ds ...string) string {
		return `{"domain":"test","descriptors":[` + strings.Join(ds, ",") + `]}`
	}
	remaining := func(user string) float64 {
		t.Helper()
		code, out := post(request(descriptor(user, 0, "take")))
		if code != http.StatusOK {
			t.Fatalf("a look at %s: %d", user, code)
		}
		return out.Statuses[0].Remaining
	}
	// Every master answers, and the client knows which serves which slot.
	for _, u := range []string{dead, live} {
		if r := remaining(u); r != 10000 {
			t.Fatalf("%s has %v left before any request, want 10000", u, r)
		}
	}

	cluster.Masters[0].Stop()
	partly := func() float64 { return testutil.ToFloat64(m.storePartial) }
	for i := range 5 {
		if code, _ := post(request(descriptor(dead, 1000, "charge"), descriptor(live, 1000, "charge"))); code != http.StatusServiceUnavailable {
			t.Fatalf("charge %d on a dead and a live master: %d, want 503", i, code)
		}
	}
	if r := remaining(live); r != 5000 {
		t.Errorf("after 5 failed charges of 1000, the live master's key has %v left, want 5000 (each took its hits)", r)
	}
	if n := partly(); n != 5 {
		t.Errorf("%v requests counted as partly applied, want 5", n)
	}
	if n := testutil.ToFloat64(m.storeErrors); n != 5 {
		t.Errorf("%v store errors, want 5", n)
	}

	// Nothing changed: not counted.
	if code, _ := post(request(descriptor(dead, 1000, "charge"))); code != http.StatusServiceUnavailable {
		t.Fatalf("a charge on the dead master: %d, want 503", code)
	}
	if code, _ := post(request(descriptor(dead, 1, "take"), descriptor(live, 6000, "take"))); code != http.StatusServiceUnavailable {
		t.Fatalf("a take the live master denies: %d, want 503", code)
	}
	if r := remaining(live); r != 5000 {
		t.Errorf("a denied take took from the live master: %v left, want 5000", r)
	}
	if n := partly(); n != 5 {
		t.Errorf("%v requests counted as partly applied, want still 5: the last two changed nothing", n)
	}

	// An enforced rule on the live master, a shadow rule on the dead one:
	// two calls, and the enforced one took.
	if code, _ := post(request(descriptor(live, 10, "take"), trial)); code != http.StatusServiceUnavailable {
		t.Fatalf("a take on the live master with a shadow rule on the dead one: %d, want 503", code)
	}
	if r := remaining(live); r != 4990 {
		t.Errorf("the enforced rule's key has %v left, want 4990", r)
	}
	if n := partly(); n != 6 {
		t.Errorf("%v requests counted as partly applied, want 6", n)
	}
}

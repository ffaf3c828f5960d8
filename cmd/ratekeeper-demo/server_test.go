package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/catalog"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// forEachBackend runs f against the in-process store and, under `make
// test`, against Redis, with keys of its own.
func forEachBackend(t *testing.T, f func(t *testing.T, be *backend)) {
	t.Run("memory", func(t *testing.T) {
		f(t, memoryBackend(t))
	})
	t.Run("redis", func(t *testing.T) {
		client := redistest.Client(t)
		store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
		f(t, &backend{store: store, kind: backendRedis, addr: client.Options().Addr, close: func() error { return nil }})
	})
}

func memoryBackend(t *testing.T) *backend {
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	return &backend{store: store, kind: backendMemory, close: store.Close}
}

func newTestServer(t *testing.T, be *backend) *server {
	t.Helper()
	s, err := newServer(be, defaultConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func do(t *testing.T, h http.Handler, method, path, contentType, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, w.Body)
	}
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decoding %s: %v", w.Body, err)
	}
	return v
}

func postConfig(t *testing.T, h http.Handler, contentType, body string) configReply {
	t.Helper()
	w := do(t, h, http.MethodPost, "/config", contentType, body)
	if w.Code != http.StatusOK {
		t.Fatalf("POST /config %s: %d %s", body, w.Code, w.Body)
	}
	reply := decode[configReply](t, w)
	if !reply.Success {
		t.Fatalf("POST /config %s: %s", body, w.Body)
	}
	return reply
}

func getState(t *testing.T, h http.Handler) stateReply {
	t.Helper()
	w := do(t, h, http.MethodGet, "/state", "", "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /state: %d %s", w.Code, w.Body)
	}
	return decode[stateReply](t, w)
}

func TestConfigJSON(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		// The original token bucket demo's request: no algorithm, three fields.
		got := postConfig(t, s, "application/json", `{"capacity":5,"refill_rate":0.5,"refill_interval":1.5}`).Config
		want := withValues("token_bucket", map[string]float64{"capacity": 5, "refill_rate": 0.5, "refill_interval": 1.5})
		if !got.equal(want) {
			t.Fatalf("config %+v, want %+v", got, want)
		}
		st := getState(t, s)
		if !st.Config.equal(want) || st.Algorithm != "token_bucket" || st.Limit != 5 || st.Remaining != 5 || st.WindowMs != 15000 {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestConfigForm(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		got := postConfig(t, s, "application/x-www-form-urlencoded", "algorithm=leaky_bucket&capacity=4&leak_rate=2.5").Config
		want := withValues("leaky_bucket", map[string]float64{"capacity": 4, "leak_rate": 2.5})
		if !got.equal(want) {
			t.Fatalf("config %+v, want %+v", got, want)
		}
		if st := getState(t, s); !st.Config.equal(want) || st.Limit != 4 || st.Backend != be.kind {
			t.Fatalf("state %+v", st)
		}
	})
}

// TestEveryAlgorithm selects each algorithm, JSON and form alike, and
// drains it: Limit requests pass, the next is denied.
func TestEveryAlgorithm(t *testing.T) {
	bodies := map[string]string{}
	for i, a := range algorithms {
		bodies[a.Name] = drainBody(a, i%2 == 0)
	}
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		for alg, body := range bodies {
			ct := "application/x-www-form-urlencoded"
			if strings.HasPrefix(body, "{") {
				ct = "application/json"
			}
			if got := postConfig(t, s, ct, body).Config.Algorithm; got != alg {
				t.Fatalf("%s: algorithm %q", body, got)
			}
			for i := range 4 {
				w := do(t, s, http.MethodPost, "/test", "", "")
				want := http.StatusOK
				if i == 3 {
					want = http.StatusTooManyRequests
				}
				if w.Code != want {
					t.Fatalf("%s: request %d: %d %s", alg, i+1, w.Code, w.Body)
				}
				if p := w.Header().Get("RateLimit-Policy"); !strings.HasPrefix(p, `"`+alg+`";q=3;`) {
					t.Errorf("%s: RateLimit-Policy %q", alg, p)
				}
			}
		}
	})
}

// drainBody is a change to algorithm a, as JSON or a form, that admits
// 3 requests at once and then one an hour: a burst of 3 and a rate of 1
// per period of an hour, or a limit of 3 per hour.
func drainBody(a algorithm, asJSON bool) string {
	perSecond := !slices.ContainsFunc(a.Fields, func(f field) bool { return f.param.Role == catalog.RolePeriod })
	var parts []string
	for _, f := range a.Fields {
		v := 0.0
		switch f.param.Role {
		case catalog.RoleBurst:
			v = 3
		case catalog.RolePeriod:
			v = 3600
		case catalog.RoleRate:
			switch {
			case !a.alg.Bursts():
				v = 3
			case perSecond:
				v = 1.0 / 3600
			default:
				v = 1
			}
		}
		if asJSON {
			parts = append(parts, fmt.Sprintf("%q:%v", f.Name, v))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%v", f.Name, v))
		}
	}
	if asJSON {
		return fmt.Sprintf(`{"algorithm":%q,%s}`, a.Name, strings.Join(parts, ","))
	}
	return "algorithm=" + a.Name + "&" + strings.Join(parts, "&")
}

// TestConfigKeepsAlgorithm changes one field of the current algorithm
// without naming it.
func TestConfigKeepsAlgorithm(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	postConfig(t, s, "", "algorithm=gcra")
	got := postConfig(t, s, "", "burst=7").Config
	if want := withValues("gcra", map[string]float64{"rate": 1, "period": 1, "burst": 7}); !got.equal(want) {
		t.Errorf("config %+v, want %+v", got, want)
	}
	got = postConfig(t, s, "application/json", `{"rate":2}`).Config
	if want := withValues("gcra", map[string]float64{"rate": 2, "period": 1, "burst": 7}); !got.equal(want) {
		t.Errorf("config %+v, want %+v", got, want)
	}
}

// TestCrossOrigin checks that another site's page cannot change the policy
// or reset the key, while the demo's own page and curl can.
func TestCrossOrigin(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	for _, path := range []string{"/config", "/reset", "/test"} {
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
			{"Origin": "https://evil.example"}, // a browser without Sec-Fetch-Site
		} {
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader("capacity=1&refill_interval=3600000"))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range h {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != http.StatusForbidden || !strings.Contains(decode[errorReply](t, w).Error, "cross-origin request refused") {
				t.Errorf("POST %s with %v: %d %s", path, h, w.Code, w.Body)
			}
		}
	}
	if st := getState(t, s); !st.Config.equal(defaultConfig()) {
		t.Fatalf("a cross-origin request changed the policy to %+v", st.Config)
	}
	// The page's own requests, and those of curl, which sends neither header.
	r := httptest.NewRequest(http.MethodPost, "/config", strings.NewReader("capacity=4"))
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.Header.Set("Origin", "http://example.com")
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Errorf("a same-origin POST /config: %d %s", w.Code, w.Body)
	}
	postConfig(t, s, "", "capacity=5")
}

func TestConfigKeepsOmittedFields(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	postConfig(t, s, "", "refill_interval=2")
	got := postConfig(t, s, "", "capacity=5").Config
	if want := withValues("token_bucket", map[string]float64{"capacity": 5, "refill_rate": 1, "refill_interval": 2}); !got.equal(want) {
		t.Errorf("config %+v, want %+v", got, want)
	}
	// A new algorithm starts from its defaults.
	got = postConfig(t, s, "", "algorithm=gcra&rate=3").Config
	if want := withValues("gcra", map[string]float64{"rate": 3, "period": 1, "burst": 10}); !got.equal(want) {
		t.Errorf("config %+v, want %+v", got, want)
	}
}

func TestConfigInvalid(t *testing.T) {
	tests := []struct {
		contentType, body string
		status            int
		field             string
		error             string // a part of the message
	}{
		// Each field's range, as a person would say it.
		{"", "capacity=0", 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000,000."},
		{"", "capacity=-1", 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000,000."},
		{"", "capacity=abc", 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000,000."},
		{"", "capacity=2.5", 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000,000."},
		{"application/json", `{"capacity":1e300}`, 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000,000."},
		{"", "refill_rate=-1", 400, "refill_rate", "Refill rate must be a number above 0, such as 0.5."},
		{"", "refill_rate=", 400, "refill_rate", "Refill rate must be a number above 0"},
		{"", "refill_rate=NaN", 400, "refill_rate", "Refill rate must be a number above 0"},
		{"", "refill_rate=2e9", 400, "refill_rate", "Refill rate must be at most 1,000,000,000."},
		{"application/json", `{"refill_interval":0}`, 400, "refill_interval", "Refill interval must be a number of seconds above 0, such as 1.5."},
		{"", "refill_interval=1e12", 400, "refill_interval", "Refill interval must be at most 315,360,000 seconds (10 years)."},
		{"", "refill_interval=1e300", 400, "refill_interval", "at most 315,360,000 seconds"},
		{"", "algorithm=fixed_window&window=-3", 400, "window", "Window must be a number of seconds above 0"},
		{"", "algorithm=sliding_window_log&limit=100000", 400, "limit", "Limit must be a whole number from 1 to 10,000."},
		{"", "algorithm=leaky_bucket&capacity=2000000", 400, "capacity", "Capacity must be a whole number from 1 to 1,000,000."},
		// The library's rules between fields and on resolution, reworded.
		{"", "refill_interval=0.0000001", 400, "refill_interval", "Refill interval must be a whole number of microseconds: at most 6 decimal places."},
		{"", "refill_rate=0.0000001", 400, "refill_rate", "Refill rate must be at least 0.000001."},
		{"", "algorithm=gcra&rate=5&period=0.000001", 400, "rate", "Rate must be at most one request per microsecond of the period."},
		{"", "algorithm=leaky_bucket&leak_rate=0.00000001", 400, "leak_rate", "The bucket would take more than 10 years to drain: raise the leak rate."},
		{"", "capacity=1000000000&refill_rate=0.000001&refill_interval=1", 400, "refill_rate", "more than 10 years to fill"},
		{"", "algorithm=gcra&rate=1&period=300000000&burst=5", 400, "burst", "Burst is too large for this rate"},
		// The request itself.
		{"", "", 400, "", "The request has no body"},
		{"application/json", "", 400, "", "The request has no body"},
		{"application/json", `{}`, 400, "", "The request names no field"},
		{"", "capacity=5&capacity=6", 400, "capacity", "Capacity is given 2 times: give it once."},
		{"application/json", `{"capacity":5,"capacity":6}`, 400, "capacity", "Capacity is given twice: give it once."},
		{"application/json", `{"capacity":"5"}`, 400, "capacity", "Capacity must be a number without quotes, such as 5."},
		{"application/json", `{"algorithm":5}`, 400, "algorithm", "Algorithm must be a name in quotes"},
		{"", "algorithm=nope", 400, "algorithm", `There is no algorithm "nope": choose one of fixed_window, gcra,`},
		{"", "algorithm=gcra&capacity=3", 400, "capacity", "capacity is not a setting of gcra, whose settings are rate, period, burst."},
		{"", "colour=blue", 400, "colour", `There is no setting "colour".`},
		{"", "capacity=%zz", 400, "", `The form is malformed: "%zz" is not a valid escape.`},
		{"application/json", `{"capacity":`, 400, "", "The JSON body ends too soon."},
		{"application/json", `{"capacity" 5}`, 400, "", "The body is not valid JSON at byte"},
		{"application/json", `[1,2]`, 400, "", `The body must be a JSON object, such as {"capacity":5}.`},
		{"application/json", `null`, 400, "", "The body must be a JSON object"},
		{"application/json", `{"capacity":5} {}`, 400, "", "The body holds more than one JSON object"},
		{"application/json", `{"capacity":true}`, 400, "capacity", "Capacity must be a number, not true."},
		{"application/json", `{"capacity":[1]}`, 400, "capacity", "Capacity must be a number, not a list."},
		{"application/json", `{"capacity":{}}`, 400, "capacity", "Capacity must be a number, not an object."},
		{"text/plain", "capacity=5", 415, "", "unsupported Content-Type"},
		{"", "capacity=" + strings.Repeat("9", maxBodyBytes), 413, "", "request body larger than"},
	}
	s := newTestServer(t, memoryBackend(t))
	for _, tt := range tests {
		w := do(t, s, http.MethodPost, "/config", tt.contentType, tt.body)
		name := tt.body
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d; %s", name, w.Code, tt.status, w.Body)
			continue
		}
		got := decode[errorReply](t, w)
		if got.Success || !strings.Contains(got.Error, tt.error) || got.Field != tt.field {
			t.Errorf("%s: %+v, want the field %q and an error containing %q", name, got, tt.field, tt.error)
		}
		// Nothing of Go's own wording: types, package prefixes, field names.
		for _, leak := range []string{"Go ", "interface", "map[", "ratekeeper:", "json:", "strconv", "TokenBucket", "RefillRate"} {
			if strings.Contains(got.Error, leak) {
				t.Errorf("%s: the message %q says %q", name, got.Error, leak)
			}
		}
	}
	if st := getState(t, s); !st.Config.equal(defaultConfig()) {
		t.Errorf("invalid requests changed the config to %+v", st.Config)
	}
}

func TestTest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		cfg := postConfig(t, s, "application/json", `{"capacity":3,"refill_rate":1,"refill_interval":3600}`).Config
		for i := range 3 {
			w := do(t, s, http.MethodPost, "/test", "", "")
			if w.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, w.Code, w.Body)
			}
			got := decode[testReply](t, w)
			if !got.Allowed || got.Remaining != float64(2-i) || got.Limit != 3 || !got.Config.equal(cfg) {
				t.Fatalf("request %d: %s", i+1, w.Body)
			}
			if r := w.Header().Get("X-RateLimit-Remaining"); r != fmt.Sprint(2-i) {
				t.Errorf("request %d: X-RateLimit-Remaining %q", i+1, r)
			}
		}
		w := do(t, s, http.MethodPost, "/test", "", "")
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("4th request: %d %s", w.Code, w.Body)
		}
		got := decode[testReply](t, w)
		if got.Allowed || got.Remaining != 0 || !got.Config.equal(cfg) || got.RetryAfterMs <= 3599000 || got.RetryAfterMs > 3600000 {
			t.Errorf("denied: %s", w.Body)
		}
		for name, want := range map[string]string{
			"Retry-After":           "3600",
			"RateLimit-Policy":      `"token_bucket";q=3;w=10800`,
			"RateLimit":             `"token_bucket";r=0;t=3600`,
			"X-RateLimit-Limit":     "3",
			"X-RateLimit-Remaining": "0",
		} {
			if got := w.Header().Get(name); got != want {
				t.Errorf("%s: %q, want %q", name, got, want)
			}
		}
		if w.Header().Get("X-RateLimit-Reset") == "" {
			t.Error("no X-RateLimit-Reset")
		}
	})
}

func TestStateAndReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		postConfig(t, s, "", "capacity=2&refill_rate=1&refill_interval=3600")
		st := getState(t, s)
		if !st.Allowed || st.Remaining != 2 || st.Limit != 2 || st.RetryAfterMs != 0 || st.ResetAfterMs != 0 ||
			st.Backend != be.kind || st.RedisAddr != be.addr || st.Algorithm != "token_bucket" {
			t.Fatalf("fresh state %+v", st)
		}
		do(t, s, http.MethodPost, "/test", "", "")
		do(t, s, http.MethodPost, "/test", "", "")
		st = getState(t, s)
		if st.Allowed || st.Remaining != 0 || st.RetryAfterMs <= 0 || st.ResetAfterMs <= st.RetryAfterMs {
			t.Fatalf("drained state %+v", st)
		}
		if again := getState(t, s); again.Remaining != 0 {
			t.Fatalf("GET /state consumed: %+v", again)
		}
		w := do(t, s, http.MethodPost, "/reset", "", "")
		if w.Code != http.StatusOK || !decode[configReply](t, w).Success {
			t.Fatalf("POST /reset: %d %s", w.Code, w.Body)
		}
		if st = getState(t, s); !st.Allowed || st.Remaining != 2 {
			t.Fatalf("state after reset %+v", st)
		}
	})
}

func TestConfigChangeResets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		postConfig(t, s, "", "capacity=2&refill_rate=1&refill_interval=3600")
		do(t, s, http.MethodPost, "/test", "", "")
		// The same configuration again changes nothing.
		postConfig(t, s, "", "capacity=2")
		if st := getState(t, s); st.Remaining != 1 {
			t.Fatalf("an unchanged config reset the key: %+v", st)
		}
		do(t, s, http.MethodPost, "/test", "", "")
		postConfig(t, s, "", "capacity=3")
		if st := getState(t, s); st.Remaining != 3 {
			t.Fatalf("after a new capacity: %+v", st)
		}
		// Switching away and back finds no state left by the first.
		do(t, s, http.MethodPost, "/test", "", "")
		postConfig(t, s, "", "algorithm=gcra")
		postConfig(t, s, "", "algorithm=token_bucket&capacity=3&refill_interval=3600")
		if st := getState(t, s); st.Remaining != 3 {
			t.Fatalf("after switching back: %+v", st)
		}
	})
}

func TestRoutes(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	tests := []struct {
		method, path string
		status       int
		allow        string
		contentType  string
	}{
		{"GET", "/", 200, "", "text/html; charset=utf-8"},
		{"HEAD", "/", 200, "", "text/html; charset=utf-8"},
		{"GET", "/static/app.js", 200, "", "text/javascript; charset=utf-8"},
		{"GET", "/static/style.css", 200, "", "text/css; charset=utf-8"},
		{"GET", "/static/", 404, "", "application/json"},
		{"GET", "/static/nope.js", 404, "", "application/json"},
		{"GET", "/static/favicon.svg", 200, "", "image/svg+xml"},
		{"POST", "/", 405, "GET, HEAD", "application/json"},
		{"GET", "/test", 405, "POST", "application/json"},
		{"PUT", "/config", 405, "POST", "application/json"},
		{"POST", "/state", 405, "GET, HEAD", "application/json"},
		{"GET", "/reset", 405, "POST", "application/json"},
		{"GET", "/nope", 404, "", "application/json"},
	}
	for _, tt := range tests {
		w := do(t, s, tt.method, tt.path, "", "")
		if w.Code != tt.status || w.Header().Get("Allow") != tt.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, Allow %q", tt.method, tt.path, w.Code, w.Header().Get("Allow"), tt.status, tt.allow)
		}
		if tt.contentType != "" && w.Header().Get("Content-Type") != tt.contentType {
			t.Errorf("%s %s: Content-Type %q, want %q", tt.method, tt.path, w.Header().Get("Content-Type"), tt.contentType)
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("%s %s: Content-Security-Policy %q", tt.method, tt.path, csp)
		}
	}
	w := do(t, s, "GET", "/", "", "")
	for _, want := range []string{"Submit Request", `id="level"`, `id="timeline"`, "/static/app.js"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestConcurrentChanges changes the configuration while requests run, for
// the race detector, and checks that every answer is consistent.
func TestConcurrentChanges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 25 {
					body := fmt.Sprintf("algorithm=token_bucket&capacity=%d", 1+(g*25+i)%7)
					if w := do(t, s, http.MethodPost, "/config", "", body); w.Code != http.StatusOK {
						t.Errorf("POST /config %s: %d %s", body, w.Code, w.Body)
						return
					}
				}
			})
			wg.Go(func() {
				for range 50 {
					w := do(t, s, http.MethodPost, "/test", "", "")
					if w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
						t.Errorf("POST /test: %d %s", w.Code, w.Body)
						return
					}
					var got testReply
					if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || float64(got.Limit) != got.Config.value("capacity") {
						t.Errorf("POST /test: %s", w.Body)
						return
					}
					if w := do(t, s, http.MethodGet, "/state", "", ""); w.Code != http.StatusOK {
						t.Errorf("GET /state: %d %s", w.Code, w.Body)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

// TestStoreFailure checks what a failing store answers: a 503 that names
// Redis as down in plain words, and a state that still tells the policy.
func TestStoreFailure(t *testing.T) {
	s := newTestServer(t, &backend{store: failingStore{}, kind: backendRedis, addr: "10.0.0.1:6379"})
	const want = "Redis at 10.0.0.1:6379 is not answering, so no request can be decided until it is back."
	for _, path := range []string{"/test", "/reset"} {
		w := do(t, s, http.MethodPost, path, "", "")
		if got := decode[errorReply](t, w); w.Code != http.StatusServiceUnavailable || got.Error != want {
			t.Errorf("POST %s: %d %s", path, w.Code, w.Body)
		}
	}
	w := do(t, s, http.MethodGet, "/state", "", "")
	var st map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusServiceUnavailable || st["store_ok"] != false || st["error"] != want ||
		st["backend"] != "redis" || st["redis_addr"] != "10.0.0.1:6379" || st["algorithm"] != "token_bucket" {
		t.Errorf("GET /state: %d %s", w.Code, w.Body)
	}
	if _, ok := st["remaining"]; ok {
		t.Errorf("GET /state shows a level while the store is down: %s", w.Body)
	}
	if cfg, _ := st["config"].(map[string]any); cfg["capacity"] != 10.0 {
		t.Errorf("GET /state: no policy while the store is down: %s", w.Body)
	}
}

type failingStore struct{}

func (failingStore) Decide(context.Context, string, *driver.ValidSpec, int64) (driver.Decision, error) {
	return driver.Decision{}, errors.New("store is down")
}

func (failingStore) Reset(context.Context, string, *driver.ValidSpec) error {
	return errors.New("store is down")
}

// TestAlgorithmsEndpoint checks that GET /algorithms serves the one table
// the server parses with: every algorithm, with each field's label, kind,
// range and a default that the server itself starts from.
func TestAlgorithmsEndpoint(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	w := do(t, s, http.MethodGet, "/algorithms", "", "")
	if w.Code != http.StatusOK {
		t.Fatalf("GET /algorithms: %d %s", w.Code, w.Body)
	}
	got := decode[[]algorithm](t, w)
	want := map[string][]string{} // the library's
	for _, a := range catalog.All() {
		for _, p := range a.Params {
			want[a.Name] = append(want[a.Name], p.Name)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d algorithms, want %d: %s", len(got), len(want), w.Body)
	}
	for _, a := range got {
		if a.Label == "" || a.Help == "" || a.Summary == "" || a.Level == "" || a.Short == "" {
			t.Errorf("%s lacks a label, help, summary, level or short name: %+v", a.Name, a)
		}
		var names []string
		for _, f := range a.Fields {
			names = append(names, f.Name)
			if f.Label == "" || f.Hint == "" || f.Max <= 0 {
				t.Errorf("%s %s lacks a label, hint or range: %+v", a.Name, f.Name, f)
			}
			switch f.Kind {
			case kindWhole, kindDecimal, kindSeconds:
			default:
				t.Errorf("%s %s has kind %q", a.Name, f.Name, f.Kind)
			}
			// The default the page shows is the one the server uses.
			var parsed config
			parsed.Algorithm = a.Name
			if _, err := parseConfig(map[string]string{"algorithm": a.Name, f.Name: fmt.Sprint(f.Default)}, parsed); err != nil {
				t.Errorf("%s %s default %v: %v", a.Name, f.Name, f.Default, err)
			}
		}
		if fmt.Sprint(names) != fmt.Sprint(want[a.Name]) {
			t.Errorf("%s fields %v, want %v", a.Name, names, want[a.Name])
		}
	}
	// The sliding window log's limit is bounded by its own maximum, in
	// the table and in the server's message alike.
	for _, a := range got {
		if a.Name != "sliding_window_log" {
			continue
		}
		if a.Fields[0].Max != ratekeeper.MaxLogLimit {
			t.Errorf("sliding_window_log limit max %v, want %d", a.Fields[0].Max, ratekeeper.MaxLogLimit)
		}
	}
}

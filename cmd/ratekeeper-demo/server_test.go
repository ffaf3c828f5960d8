package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ratekeeper/ratekeeper"
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
	s, err := newServer(be, defaultConfig(), log.New(io.Discard, "", 0))
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
		want := config{Algorithm: "token_bucket", Capacity: 5, RefillRate: 0.5, RefillInterval: 1.5}
		if got != want {
			t.Fatalf("config %+v, want %+v", got, want)
		}
		st := getState(t, s)
		if st.Config != want || st.Algorithm != "token_bucket" || st.Limit != 5 || st.Remaining != 5 || st.WindowMs != 15000 {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestConfigForm(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		got := postConfig(t, s, "application/x-www-form-urlencoded", "algorithm=leaky_bucket&capacity=4&leak_rate=2.5").Config
		want := config{Algorithm: "leaky_bucket", Capacity: 4, LeakRate: 2.5}
		if got != want {
			t.Fatalf("config %+v, want %+v", got, want)
		}
		if st := getState(t, s); st.Config != want || st.Limit != 4 || st.Backend != be.kind {
			t.Fatalf("state %+v", st)
		}
	})
}

// TestEveryAlgorithm selects each algorithm, JSON and form alike, and
// drains it: Limit requests pass, the next is denied.
func TestEveryAlgorithm(t *testing.T) {
	bodies := map[string]string{
		"token_bucket":           `{"algorithm":"token_bucket","capacity":3,"refill_rate":1,"refill_interval":3600}`,
		"gcra":                   `algorithm=gcra&rate=1&period=3600&burst=3`,
		"fixed_window":           `{"algorithm":"fixed_window","limit":3,"window":3600}`,
		"sliding_window_log":     `algorithm=sliding_window_log&limit=3&window=3600`,
		"sliding_window_counter": `{"algorithm":"sliding_window_counter","limit":"3","window":"3600"}`,
		"leaky_bucket":           `algorithm=leaky_bucket&capacity=3&leak_rate=0.001`,
	}
	if len(bodies) != len(params) {
		t.Fatalf("the test covers %d algorithms of %d", len(bodies), len(params))
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

func TestConfigKeepsOmittedFields(t *testing.T) {
	s := newTestServer(t, memoryBackend(t))
	postConfig(t, s, "", "refill_interval=2")
	got := postConfig(t, s, "", "capacity=5").Config
	if want := (config{Algorithm: "token_bucket", Capacity: 5, RefillRate: 1, RefillInterval: 2}); got != want {
		t.Errorf("config %+v, want %+v", got, want)
	}
	// A new algorithm starts from its defaults.
	got = postConfig(t, s, "", "algorithm=gcra&rate=3").Config
	if want := (config{Algorithm: "gcra", Rate: 3, Period: 1, Burst: 10}); got != want {
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
		// The library's own validation messages.
		{"", "capacity=0", 400, "capacity", "ratekeeper: invalid policy: TokenBucket Capacity must be between 1 and"},
		{"", "refill_rate=-1", 400, "refill_rate", "RefillRate must be a positive finite number"},
		{"application/json", `{"refill_interval":0}`, 400, "refill_interval", "RefillInterval must be positive"},
		{"", "refill_interval=0.0000001", 400, "refill_interval", "not a whole number of microseconds"},
		{"", "algorithm=gcra&rate=5&period=0.000001", 400, "rate", "more than one request per microsecond"},
		{"", "algorithm=sliding_window_log&limit=100000", 400, "limit", "Limit must be between 1 and 10000"},
		{"", "algorithm=leaky_bucket&leak_rate=0.0001", 400, "leak_rate", "below the resolution"},
		{"", "algorithm=fixed_window&window=-3", 400, "window", "Window must be positive"},
		// The demo's own parsing.
		{"", "capacity=abc", 400, "capacity", `capacity must be a whole number, got "abc"`},
		{"", "capacity=2.5", 400, "capacity", "whole number"},
		{"", "refill_rate=", 400, "refill_rate", "refill_rate is empty"},
		{"", "refill_rate=NaN", 400, "refill_rate", "finite number"},
		{"", "refill_interval=1e300", 400, "refill_interval", "too long"},
		{"", "algorithm=nope", 400, "algorithm", `unknown algorithm "nope"`},
		{"", "algorithm=gcra&capacity=3", 400, "capacity", "capacity is not a parameter of gcra"},
		{"", "colour=blue", 400, "colour", `unknown field "colour"`},
		{"", "capacity=%zz", 400, "", "malformed form"},
		{"application/json", `{"capacity":`, 400, "", "malformed JSON"},
		{"application/json", `[1,2]`, 400, "", "malformed JSON"},
		{"application/json", `null`, 400, "", "malformed JSON"},
		{"application/json", `{"capacity":5} {}`, 400, "", "data after the object"},
		{"application/json", `{"capacity":true}`, 400, "capacity", "capacity must be a number, got true"},
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
	}
	if st := getState(t, s); st.Config != defaultConfig() {
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
			if !got.Allowed || got.Remaining != float64(2-i) || got.Limit != 3 || got.Config != cfg {
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
		if got.Allowed || got.Remaining != 0 || got.Config != cfg || got.RetryAfterMs <= 3599000 || got.RetryAfterMs > 3600000 {
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
		{"GET", "/static/nope.js", 404, "", ""},
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
					if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Limit != got.Config.Capacity {
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

func TestStoreFailure(t *testing.T) {
	s := newTestServer(t, &backend{store: failingStore{}, kind: backendRedis, addr: "test"})
	for _, path := range []string{"/test", "/reset"} {
		w := do(t, s, http.MethodPost, path, "", "")
		if got := decode[errorReply](t, w); w.Code != http.StatusServiceUnavailable || !strings.Contains(got.Error, "store is down") {
			t.Errorf("POST %s: %d %s", path, w.Code, w.Body)
		}
	}
	if w := do(t, s, http.MethodGet, "/state", "", ""); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /state: %d %s", w.Code, w.Body)
	}
}

type failingStore struct{}

func (failingStore) Decide(context.Context, string, *driver.ValidSpec, int64) (ratekeeper.Result, error) {
	return ratekeeper.Result{}, errors.New("store is down")
}

func (failingStore) Reset(context.Context, string, *driver.ValidSpec) error {
	return errors.New("store is down")
}

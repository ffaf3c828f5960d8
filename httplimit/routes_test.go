package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestKeyFromContext: the handler reads the key its request was limited
// under, and the denied handler does too.
func TestKeyFromContext(t *testing.T) {
	lim, _ := memLimiter(t, slow(1))
	var keys []string
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := KeyFromContext(r.Context())
		if !ok {
			t.Error("no key in the context")
		}
		keys = append(keys, key)
	})
	h := Middleware(lim, WithKeyFunc(HeaderKey("X-API-Key")), WithDeniedHandler(record))(record)
	header := http.Header{"X-Api-Key": {"k1"}}
	serve(h, "192.0.2.1:1234", header)
	serve(h, "192.0.2.1:1234", header) // denied
	if len(keys) != 2 || keys[0] != "x-api-key:k1" || keys[1] != keys[0] {
		t.Errorf("keys = %q, want x-api-key:k1 twice", keys)
	}
	if _, ok := KeyFromContext(httptest.NewRequest("GET", "/", nil).Context()); ok {
		t.Error("a key without a decision")
	}
}

// TestExempt: exempt requests are served without a decision, and take
// nothing from the client's limit.
func TestExempt(t *testing.T) {
	lim, _ := memLimiter(t, slow(1))
	h := Middleware(lim, WithExempt(func(r *http.Request) bool {
		return r.URL.Path == "/healthz"
	}))(okHandler)
	for range 3 {
		w := serveAt(h, "/healthz")
		if w.Code != http.StatusOK || w.Header().Get("RateLimit") != "" {
			t.Fatalf("exempt request: %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
		}
	}
	if w := serveAt(h, "/api"); w.Code != http.StatusOK {
		t.Errorf("first limited request: %d", w.Code)
	}
	if w := serveAt(h, "/api"); w.Code != http.StatusTooManyRequests {
		t.Errorf("second limited request: %d", w.Code)
	}
}

// TestPerRoute: each route of a client has its own limit, whether the
// middleware wraps the route's handler or the whole mux; paths of one
// pattern share it, and unmatched paths share one.
func TestPerRoute(t *testing.T) {
	for _, wrapMux := range []bool{false, true} {
		lim, _ := memLimiter(t, slow(1))
		mux := http.NewServeMux()
		var h http.Handler = mux
		limit := Middleware(lim, WithKeyFunc(PerRoute(mux, ClientIP())))
		if wrapMux {
			mux.Handle("GET /items/{id}", okHandler)
			mux.Handle("GET /users", okHandler)
			h = limit(mux)
		} else {
			mux.Handle("GET /items/{id}", limit(okHandler))
			mux.Handle("GET /users", limit(okHandler))
		}
		type step struct {
			path string
			code int
		}
		want := []step{
			{"/items/1", http.StatusOK},
			{"/items/2", http.StatusTooManyRequests}, // the same route
			{"/users", http.StatusOK},                // another route
			{"/users", http.StatusTooManyRequests},
		}
		if wrapMux {
			// Unmatched paths share the route "": the first is served
			// (404), the second denied.
			want = append(want, step{"/nowhere", http.StatusNotFound}, step{"/elsewhere", http.StatusTooManyRequests})
		}
		for _, w := range want {
			if got := serveAt(h, w.path); got.Code != w.code {
				t.Errorf("wrap mux %v: GET %s: %d, want %d", wrapMux, w.path, got.Code, w.code)
			}
		}
	}
	key, err := PerRoute(nil, HeaderKey("X-User"))(func() *http.Request {
		r := httptest.NewRequest("GET", "/items/7", nil)
		r.Pattern = "GET /items/{id}"
		r.Header.Set("X-User", "ann")
		return r
	}())
	if err != nil || !strings.HasPrefix(key, "GET /items/{id} ") {
		t.Errorf("PerRoute key = %q, %v", key, err)
	}
}

func serveAt(h http.Handler, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestForwardedOnLocalhost is docs/http.md's way to try X-Forwarded-For
// on one's own machine: trust the loopback peer.
func TestForwardedOnLocalhost(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "127.0.0.1:50000"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	if key, err := ClientIP("127.0.0.1")(r); err != nil || key != "ip:203.0.113.7" {
		t.Errorf("trusting loopback: %q, %v", key, err)
	}
	if key, err := ClientIP()(r); err != nil || key != "ip:127.0.0.1" {
		t.Errorf("trusting nobody: %q, %v", key, err)
	}
}

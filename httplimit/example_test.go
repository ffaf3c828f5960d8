package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

var hello = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })

// perMinute returns a limiter of n requests a minute, kept in memory. Its
// clock is frozen, so that the outputs below never depend on timing.
func perMinute(n int64, opts ...ratekeeper.Option) *ratekeeper.Limiter {
	now := time.Now()
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{
		Capacity: n, RefillRate: float64(n), RefillInterval: time.Minute}, opts...)
	if err != nil {
		panic(err)
	}
	return lim
}

// Limit each client IP address to 2 requests a minute. Without trusted
// proxies, the client is the peer of the connection.
func ExampleMiddleware() {
	h := httplimit.Middleware(perMinute(2))(hello)
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "203.0.113.7:52100"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
			fmt.Print(w.Body)
		}
	}
	// Output:
	// 200 "token_bucket";r=1;t=60
	// 200 "token_bucket";r=0;t=60
	// 429 "token_bucket";r=0;t=60
	// Retry-After: 60
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"The \"token_bucket\" rate limit is exhausted; retry after 60 s.","violated-policies":["token_bucket"]}
}

// Behind load balancers in 10.0.0.0/8, which append the client to
// X-Forwarded-For, each client is keyed on its own address, whatever it
// writes in the header itself.
func ExampleClientIP() {
	h := httplimit.Middleware(perMinute(2),
		httplimit.WithKeyFunc(httplimit.ClientIP("10.0.0.0/8")))(hello)
	get := func(spoofed, client string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.2:52100" // the load balancer
		r.Header.Set("X-Forwarded-For", spoofed+", "+client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(client, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	get("192.0.2.1", "203.0.113.7")
	get("192.0.2.2", "203.0.113.7") // another spoofed address: the same client
	get("192.0.2.3", "203.0.113.7")
	get("192.0.2.1", "198.51.100.4")
	// Output:
	// 203.0.113.7 200 1
	// 203.0.113.7 200 0
	// 203.0.113.7 429 0
	// 198.51.100.4 200 1
}

// Behind nginx servers in 10.0.0.0/8 that set X-Real-IP and pass on
// whatever X-Forwarded-For the client sent, each client is keyed on
// X-Real-IP alone: the X-Forwarded-For it writes itself is never read.
func ExampleNewClientIP() {
	lim := perMinute(2)
	key, err := httplimit.NewClientIP(httplimit.ClientIPConfig{
		TrustedProxies: []string{"10.0.0.0/8"}, // our nginx servers
		Header:         "X-Real-IP",            // proxy_set_header X-Real-IP $remote_addr;
	})
	if err != nil {
		log.Fatal(err)
	}
	limit := httplimit.Middleware(lim, httplimit.WithKeyFunc(key))

	h := limit(hello)
	for _, spoofed := range []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.2:52100"          // nginx
		r.Header.Set("X-Forwarded-For", spoofed) // from the client
		r.Header.Set("X-Real-IP", "203.0.113.7") // from nginx
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(spoofed, w.Code)
	}
	// Output:
	// 192.0.2.1 200
	// 192.0.2.2 200
	// 192.0.2.3 429
}

// Limit each API key, and answer requests without one with 400.
func ExampleHeaderKey() {
	h := httplimit.Middleware(perMinute(100, ratekeeper.WithName("api")),
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key")),
		httplimit.WithLogger(slog.New(slog.DiscardHandler)))(hello)
	for _, apiKey := range []string{"", "k-123"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if apiKey != "" {
			r.Header.Set("X-API-Key", apiKey)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body)
		if rl := w.Header().Get("RateLimit"); rl != "" {
			fmt.Println("RateLimit:", rl)
		}
	}
	// Output:
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"httplimit: the request has no X-Api-Key header"}
	// 200 hello
	// RateLimit: "api";r=99;t=60
}

// Limit each user on each route: "api:<route>:<user>". ServeMux sets
// Request.Pattern before it calls the route's handler, so the middleware
// wraps each route. A constant key, such as "global:api", would share one
// limit among all requests.
func ExampleWithKeyFunc() {
	routeAndUser := httplimit.WithKeyFunc(func(r *http.Request) (string, error) {
		user := r.Header.Get("X-User") // in practice, from your authentication
		if user == "" {
			return "", errors.New("not signed in")
		}
		return "api:" + r.Pattern + ":" + user, nil
	})
	limit := httplimit.Middleware(perMinute(1), routeAndUser)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", limit(hello))
	mux.Handle("POST /orders", limit(hello))

	for _, req := range []struct{ user, method, path string }{
		{"alice", "GET", "/items/1"},
		{"alice", "GET", "/items/2"}, // the same route
		{"alice", "POST", "/orders"},
		{"bob", "GET", "/items/1"},
	} {
		r := httptest.NewRequest(req.method, req.path, nil)
		r.Header.Set("X-User", req.user)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(req.user, req.method, req.path, w.Code)
	}
	// Output:
	// alice GET /items/1 200
	// alice GET /items/2 429
	// alice POST /orders 200
	// bob GET /items/1 200
}

// downStore is a store whose backend is unreachable.
type downStore struct{}

func (downStore) Decide(context.Context, string, *driver.ValidSpec, int64) (driver.Decision, error) {
	return driver.Decision{}, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

func (downStore) Reset(context.Context, string, *driver.ValidSpec) error {
	return errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// While the store is down, FailOpen (the default) serves requests
// unlimited, and FailClosed refuses them. Both log the failure.
func ExampleFailurePolicy() {
	lim, err := ratekeeper.New(downStore{}, ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		panic(err)
	}
	logger := slog.New(slog.DiscardHandler) // in practice, your logger
	for _, policy := range []httplimit.FailurePolicy{httplimit.FailOpen, httplimit.FailClosed} {
		h := httplimit.Middleware(lim, policy, httplimit.WithLogger(logger))(hello)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		fmt.Println(w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 200 hello
	// 503 {"type":"about:blank","title":"Service Unavailable","status":503,"detail":"The rate limiter is unavailable."}
}

// A client that stays under a remote API's quota of 10 requests a
// second: every request waits for its share of the limiter, which a
// fleet shares over Redis (here, in memory). A request whose context
// ends first is not sent.
func ExampleTransport() {
	api := httptest.NewServer(hello)
	defer api.Close()
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.Transport(lim, http.DefaultTransport, httplimit.PerHost())}

	start := time.Now()
	for range 3 {
		resp, err := client.Get(api.URL)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	fmt.Println("3 requests, at least 200ms:", time.Since(start) >= 200*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api.URL, nil)
	_, err = client.Do(req)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// 3 requests, at least 200ms: true
	// true
}

// With WithRetryAfterCharge, a 429 with Retry-After: 2 drains the shared
// key for 2 seconds: no process of the fleet sends before then.
func ExampleWithRetryAfterCharge() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer api.Close()
	now := time.Now()
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	lim, err := ratekeeper.New(store, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.Transport(lim, nil,
		httplimit.FixedKey("partner-api"), httplimit.WithRetryAfterCharge())}
	resp, err := client.Get(api.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	res, _ := lim.Peek(context.Background(), "partner-api")
	fmt.Println(resp.StatusCode, "next request in", res.RetryAfter)
	// Output:
	// 429 next request in 2s
}

package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield"
	"github.com/ratekeeper/ratekeeper/internal/ratelimitfield/fieldtest"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

var quiet = slog.New(slog.DiscardHandler)

// unhurried lifts the store timeout for tests that count admissions: on a
// loaded machine a Redis call can outlast it, and the request, failed
// open, would count as allowed.
var unhurried = WithStoreTimeout(0)

// newClock returns a controlled clock at a fixed start.
func newClock() *testutil.Clock { return testutil.NewClock(time.Unix(1_700_000_000, 0)) }

// backend is a limiter over one of the stores, with a count of the keys
// its store holds.
type backend struct {
	lim  *ratekeeper.Limiter
	keys func() int
}

// backends runs test against memstore and, when a test Redis is set,
// redisstore, each store reading the time from now if it is not nil.
func backends(t *testing.T, p ratekeeper.Policy, now func() time.Time, test func(t *testing.T, b backend)) {
	t.Run("memstore", func(t *testing.T) {
		opts := []memstore.Option{memstore.WithSweepInterval(0)}
		if now != nil {
			opts = append(opts, memstore.WithClock(now))
		}
		s := memstore.New(opts...)
		t.Cleanup(func() { s.Close() })
		test(t, backend{lim: newLimiter(t, s, p), keys: s.Len})
	})
	t.Run("redis", func(t *testing.T) {
		client := redistest.Client(t)
		prefix := redistest.Prefix(t)
		opts := []redisstore.Option{redisstore.WithKeyPrefix(prefix)}
		if now != nil {
			opts = append(opts, redisstore.WithClock(now))
		}
		keys := func() []string {
			var keys []string
			iter := client.Scan(context.Background(), 0, prefix+"*", 100).Iterator()
			for iter.Next(context.Background()) {
				keys = append(keys, iter.Val())
			}
			if err := iter.Err(); err != nil {
				t.Fatal(err)
			}
			return keys
		}
		t.Cleanup(func() {
			if k := keys(); len(k) > 0 {
				client.Del(context.Background(), k...)
			}
		})
		s := redisstore.New(client, opts...)
		test(t, backend{lim: newLimiter(t, s, p), keys: func() int { return len(keys()) }})
	})
}

func newLimiter(t *testing.T, s ratekeeper.Store, p ratekeeper.Policy, opts ...ratekeeper.Option) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(s, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func memLimiter(t *testing.T, p ratekeeper.Policy) (*ratekeeper.Limiter, *memstore.Store) {
	s := memstore.New(memstore.WithSweepInterval(0))
	t.Cleanup(func() { s.Close() })
	return newLimiter(t, s, p), s
}

func serve(h http.Handler, remote string, header http.Header) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, request(remote, header))
	return w
}

// slow is a policy that refills far too slowly for a test to notice.
func slow(capacity int64) ratekeeper.TokenBucket {
	return ratekeeper.TokenBucket{Capacity: capacity, RefillRate: 1, RefillInterval: time.Hour}
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p["status"] != float64(w.Code) || p["type"] == "" || p["title"] == "" || p["detail"] == "" {
		t.Errorf("status %d, problem %v: missing or wrong members", w.Code, p)
	}
	return p
}

// TestFieldsMatchResult follows a token bucket (3 tokens, half a token a
// second) through a known sequence, and checks every field against the
// literal values and against a Peek at the same instant.
func TestFieldsMatchResult(t *testing.T) {
	clk := newClock()
	policy := ratekeeper.TokenBucket{Capacity: 3, RefillRate: 0.5, RefillInterval: time.Second}
	backends(t, policy, clk.Now, func(t *testing.T, b backend) {
		cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("Cost"), 10, 64) }
		h := Middleware(b.lim, unhurried, WithCostFunc(cost), WithKeyFunc(HeaderKey("User")))(okHandler)
		steps := []struct {
			advance    time.Duration
			cost       int64
			status     int
			rateLimit  string
			retryAfter string
		}{
			{0, 1, 200, `"token_bucket";r=2;t=2`, ""},
			{0, 1, 200, `"token_bucket";r=1;t=4`, ""},
			{0, 1, 200, `"token_bucket";r=0;t=6`, ""},
			{0, 1, 429, `"token_bucket";r=0;t=2`, "2"},
			// Half a token back at 1 s; the next half at 2 s, 0.7 s away.
			{1300 * time.Millisecond, 1, 429, `"token_bucket";r=0;t=1`, "1"},
			// 2.5 tokens at 5 s. Cost 0 is free: served, nothing taken.
			{3700 * time.Millisecond, 0, 200, `"token_bucket";r=2;t=1`, ""},
			{0, 2, 200, `"token_bucket";r=0;t=5`, ""},
			{0, 3, 429, `"token_bucket";r=0;t=5`, "5"},
			{250 * time.Millisecond, 1, 429, `"token_bucket";r=0;t=1`, "1"},
		}
		for i, s := range steps {
			clk.Advance(s.advance)
			before := time.Now()
			w := serve(h, "203.0.113.7:1", http.Header{"Cost": {strconv.FormatInt(s.cost, 10)}, "User": {"u"}})
			after := time.Now()
			got := w.Header()
			if w.Code != s.status || got.Get("RateLimit") != s.rateLimit || got.Get("Retry-After") != s.retryAfter {
				t.Fatalf("step %d: got %d, RateLimit %q, Retry-After %q; want %d, %q, %q",
					i, w.Code, got.Get("RateLimit"), got.Get("Retry-After"), s.status, s.rateLimit, s.retryAfter)
			}
			peek, err := b.lim.Peek(context.Background(), "user:u")
			if err != nil {
				t.Fatal(err)
			}
			remaining := strconv.FormatFloat(math.Floor(peek.Remaining), 'f', 0, 64)
			want := map[string]string{
				"RateLimit-Policy":      `"token_bucket";q=3;w=6`,
				"X-RateLimit-Limit":     strconv.FormatInt(peek.Limit, 10),
				"X-RateLimit-Remaining": remaining,
			}
			if s.status == 200 {
				want["RateLimit"] = fmt.Sprintf(`"token_bucket";r=%s;t=%d`, remaining, ratelimitfield.Seconds(peek.ResetAfter))
			} else if s.cost == 1 {
				want["RateLimit"] = fmt.Sprintf(`"token_bucket";r=%s;t=%d`, remaining, ratelimitfield.Seconds(peek.RetryAfter))
				want["Retry-After"] = strconv.FormatInt(ratelimitfield.Seconds(peek.RetryAfter), 10)
			}
			for name, v := range want {
				if got.Get(name) != v {
					t.Errorf("step %d: %s: %q, want %q (Result %+v)", i, name, got.Get(name), v, peek)
				}
			}
			reset, err := strconv.ParseInt(got.Get("X-RateLimit-Reset"), 10, 64)
			lo := before.Add(peek.ResetAfter).Unix()
			hi := after.Add(peek.ResetAfter).Unix() + 1
			if err != nil || reset < lo-1 || reset > hi+1 {
				t.Errorf("step %d: X-RateLimit-Reset %q, want Unix seconds in [%d, %d] ± 1", i, got.Get("X-RateLimit-Reset"), lo, hi)
			}
		}
	})
}

func TestDenied(t *testing.T) {
	lim, _ := memLimiter(t, slow(1))
	h := Middleware(lim)(okHandler)
	serve(h, "203.0.113.7:1", nil)
	w := serve(h, "203.0.113.7:1", nil)
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	p := decodeProblem(t, w)
	if p["type"] != "https://iana.org/assignments/http-problem-types#quota-exceeded" {
		t.Errorf("type %v", p["type"])
	}
	if v, ok := p["violated-policies"].([]any); !ok || len(v) != 1 || v[0] != "token_bucket" {
		t.Errorf("violated-policies %v", p["violated-policies"])
	}
	// Retry-After is never earlier than the real wait, and less than a
	// second later.
	peek, err := lim.Peek(context.Background(), "ip:203.0.113.7")
	if err != nil {
		t.Fatal(err)
	}
	retry, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if d := time.Duration(retry) * time.Second; d < peek.RetryAfter || d >= peek.RetryAfter+time.Second {
		t.Errorf("Retry-After %q for a wait of %v", w.Header().Get("Retry-After"), peek.RetryAfter)
	}

	custom := Middleware(lim, WithDeniedHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := ResultFromContext(r.Context())
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, "%v %v %s", ok, res.Allowed, w.Header().Get("Retry-After"))
	})))(okHandler)
	w = serve(custom, "203.0.113.7:1", nil)
	if w.Code != http.StatusTooManyRequests || w.Body.String() != "true false "+strconv.Itoa(retry) {
		t.Errorf("custom denied handler: %d %q", w.Code, w.Body)
	}
}

func TestResultFromContext(t *testing.T) {
	lim, _ := memLimiter(t, slow(5))
	var got ratekeeper.Result
	var ok bool
	h := Middleware(lim)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got, ok = ResultFromContext(r.Context())
	}))
	serve(h, "203.0.113.7:1", nil)
	if !ok || !got.Allowed || got.Remaining != 4 || got.Limit != 5 {
		t.Errorf("ResultFromContext = %+v, %v", got, ok)
	}
	if _, ok := ResultFromContext(context.Background()); ok {
		t.Error("ResultFromContext of a bare context reports a Result")
	}
}

func TestHeaderStyles(t *testing.T) {
	ietf := []string{"RateLimit-Policy", "RateLimit"}
	legacy := []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	for _, tt := range []struct {
		style    HeaderStyle
		present  []string
		absent   []string
		fromNone bool
	}{
		{HeadersBoth, append(ietf, legacy...), nil, false},
		{HeadersIETF, ietf, legacy, false},
		{HeadersLegacy, legacy, ietf, false},
		{HeadersNone, nil, append(ietf, legacy...), false},
	} {
		lim, _ := memLimiter(t, slow(1))
		h := Middleware(lim, WithHeaderStyle(tt.style))(okHandler)
		for _, want := range []int{200, 429} {
			w := serve(h, "203.0.113.7:1", nil)
			if w.Code != want {
				t.Fatalf("style %d: status %d, want %d", tt.style, w.Code, want)
			}
			for _, name := range tt.present {
				if w.Header().Get(name) == "" {
					t.Errorf("style %d, %d: no %s", tt.style, w.Code, name)
				}
			}
			for _, name := range tt.absent {
				if v := w.Header().Get(name); v != "" {
					t.Errorf("style %d, %d: %s: %q", tt.style, w.Code, name, v)
				}
			}
			if (w.Header().Get("Retry-After") != "") != (w.Code == 429) {
				t.Errorf("style %d, %d: Retry-After %q", tt.style, w.Code, w.Header().Get("Retry-After"))
			}
		}
	}
}

func TestPolicyName(t *testing.T) {
	s := memstore.New(memstore.WithSweepInterval(0))
	defer s.Close()
	lim := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 10, RefillRate: 3, RefillInterval: 100 * time.Millisecond},
		ratekeeper.WithName(`per "ip" \ é`))
	w := serve(Middleware(lim)(okHandler), "203.0.113.7:1", nil)
	// A window of 400 ms rounds up to 1 s; what an sf-string cannot hold
	// is percent-encoded.
	if got, want := w.Header().Get("RateLimit-Policy"), `"per \"ip\" \\ %c3%a9";q=10;w=1`; got != want {
		t.Errorf("RateLimit-Policy %s, want %s", got, want)
	}
	for _, field := range []string{"RateLimit-Policy", "RateLimit"} {
		if _, err := fieldtest.ParseList(w.Header().Get(field)); err != nil {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestAllPolicies: a limiter of several policies lists each in both
// fields, by name, from its own Result; a denial names the policies that
// denied.
func TestAllPolicies(t *testing.T) {
	lim, _ := memLimiter(t, ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.FixedWindow{Limit: 2, Window: time.Second}),
		ratekeeper.Named("day", ratekeeper.FixedWindow{Limit: 100, Window: 24 * time.Hour}),
		ratekeeper.Named("hour", ratekeeper.FixedWindow{Limit: 2, Window: time.Hour}),
	))
	h := Middleware(lim)(okHandler)
	wantPolicy := `"second";q=2;w=1, "day";q=100;w=86400, "hour";q=2;w=3600`
	for i, want := range []string{
		`"second";r=1;t=1, "day";r=99;t=86400, "hour";r=1;t=3600`,
		`"second";r=0;t=1, "day";r=98;t=86400, "hour";r=0;t=3600`,
		// Denied by two: nothing taken from the day.
		`"second";r=0;t=1, "day";r=98;t=86400, "hour";r=0;t=3600`,
	} {
		w := serve(h, "203.0.113.7:1", nil)
		if got := w.Header().Values("RateLimit-Policy"); !slices.Equal(got, []string{wantPolicy}) {
			t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, wantPolicy)
		}
		if got := w.Header().Values("RateLimit"); !slices.Equal(got, []string{want}) {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if i < 2 {
			if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Limit") != "2" {
				t.Errorf("request %d: %d, X-RateLimit-Limit %q; want 200 and the binding second's 2", i, w.Code, w.Header().Get("X-RateLimit-Limit"))
			}
			continue
		}
		// The hour binds: it denies for longest.
		if w.Code != http.StatusTooManyRequests || w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("Retry-After") != "3600" {
			t.Errorf("request %d: %d, Retry-After %q; want 429 after the hour", i, w.Code, w.Header().Get("Retry-After"))
		}
		p := decodeProblem(t, w)
		if got := fmt.Sprint(p["violated-policies"]); got != "[second hour]" {
			t.Errorf("violated-policies %s, want [second hour]", got)
		}
	}
}

func TestStacked(t *testing.T) {
	burst, _ := memLimiter(t, slow(5))
	s := memstore.New(memstore.WithSweepInterval(0))
	defer s.Close()
	daily := newLimiter(t, s, ratekeeper.TokenBucket{Capacity: 100, RefillRate: 100, RefillInterval: 24 * time.Hour},
		ratekeeper.WithName("daily"))
	h := Middleware(burst)(Middleware(daily)(okHandler))
	w := serve(h, "203.0.113.7:1", nil)
	want := map[string][]string{
		"Ratelimit-Policy":      {`"token_bucket";q=5;w=18000`, `"daily";q=100;w=86400`},
		"Ratelimit":             {`"token_bucket";r=4;t=3600`, `"daily";r=99;t=86400`},
		"X-Ratelimit-Remaining": {"99"},
	}
	for name, v := range want {
		if got := w.Header()[name]; !slices.Equal(got, v) {
			t.Errorf("%s: %q, want %q", name, got, v)
		}
	}
}

// TestSpoofedHeadersFromUntrustedPeer: a client that is not a trusted proxy
// cannot change its key with forwarding headers, so rotating them neither
// evades the limit nor adds keys to the store.
func TestSpoofedHeadersFromUntrustedPeer(t *testing.T) {
	backends(t, slow(5), nil, func(t *testing.T, b backend) {
		key := ClientIP("10.0.0.0/8")
		h := Middleware(b.lim, unhurried, WithKeyFunc(key))(okHandler)
		allowed := 0
		for i := range 50 {
			spoof := fmt.Sprintf("198.51.%d.%d", i/200, i%200+1)
			header := http.Header{
				"X-Forwarded-For": {spoof, "10.0.0.7"},
				"X-Real-Ip":       {spoof},
				"Forwarded":       {"for=" + spoof},
			}
			if k, err := key(request("203.0.113.7:1234", header)); err != nil || k != "ip:203.0.113.7" {
				t.Fatalf("key %q, %v; want ip:203.0.113.7", k, err)
			}
			if w := serve(h, "203.0.113.7:1234", header); w.Code == http.StatusOK {
				allowed++
			}
		}
		if allowed != 5 {
			t.Errorf("%d requests allowed, want 5", allowed)
		}
		if n := b.keys(); n != 1 {
			t.Errorf("the store holds %d keys, want 1", n)
		}
	})
}

// TestTrustedProxy: behind a trusted proxy the client is keyed on its own
// address, whatever it puts to the left of it.
func TestTrustedProxy(t *testing.T) {
	backends(t, slow(5), nil, func(t *testing.T, b backend) {
		key := ClientIP("10.0.0.0/8")
		h := Middleware(b.lim, unhurried, WithKeyFunc(key))(okHandler)
		allowed := 0
		for i := range 50 {
			header := http.Header{"X-Forwarded-For": {
				fmt.Sprintf("198.18.0.%d, 192.0.2.%d, 198.51.100.23", i+1, i+1), // spoofed, spoofed, the client
				"10.9.9.9", // an inner proxy
			}}
			if k, err := key(request("10.1.2.3:4444", header)); err != nil || k != "ip:198.51.100.23" {
				t.Fatalf("key %q, %v; want ip:198.51.100.23", k, err)
			}
			if w := serve(h, "10.1.2.3:4444", header); w.Code == http.StatusOK {
				allowed++
			}
		}
		if allowed != 5 {
			t.Errorf("%d requests allowed, want 5", allowed)
		}
		if n := b.keys(); n != 1 {
			t.Errorf("the store holds %d keys, want 1", n)
		}
		// Another client behind the same proxy has a bucket of its own.
		if w := serve(h, "10.1.2.3:4444", http.Header{"X-Forwarded-For": {"198.51.100.24"}}); w.Code != http.StatusOK {
			t.Errorf("another client: status %d", w.Code)
		}
	})
}

func TestIPv6Prefix(t *testing.T) {
	backends(t, slow(2), nil, func(t *testing.T, b backend) {
		h := Middleware(b.lim, unhurried)(okHandler)
		for _, tt := range []struct {
			remote string
			want   int
		}{
			{"[2001:db8:1:2::1]:1", 200},
			{"[2001:db8:1:2:ffff:ffff:ffff:ffff]:2", 200}, // same /64
			{"[2001:db8:1:2:abcd::9]:3", 429},             // same /64, now empty
			{"[2001:db8:1:3::1]:4", 200},                  // another /64
		} {
			if w := serve(h, tt.remote, nil); w.Code != tt.want {
				t.Errorf("%s: status %d, want %d", tt.remote, w.Code, tt.want)
			}
		}
		if n := b.keys(); n != 2 {
			t.Errorf("the store holds %d keys, want 2", n)
		}
	})
}

// TestEmbeddedIPv4: IPv4-mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::a.b.c.d)
// and IPv4-compatible (::a.b.c.d) addresses key as the IPv4 clients they
// carry: never masked into one /64 that every IPv4 client would share.
func TestEmbeddedIPv4(t *testing.T) {
	backends(t, slow(1), nil, func(t *testing.T, b backend) {
		h := Middleware(b.lim, unhurried)(okHandler)
		for _, tt := range []struct {
			remote string
			want   int
		}{
			{"[::ffff:192.0.2.1]:1", 200},
			{"192.0.2.1:2", 429},            // the same client
			{"[64:ff9b::192.0.2.1]:3", 429}, // the same client, through NAT64
			{"[64:ff9b::c000:201]:4", 429},  // and again, in hex
			{"[::192.0.2.1]:5", 429},        // the same client, IPv4-compatible
			{"[::ffff:192.0.2.2]:6", 200},   // distinct clients
			{"[64:ff9b::192.0.2.3]:7", 200},
			{"[::192.0.2.4]:8", 200},
			{"[64:ff9b::198.51.100.1]:9", 200},
		} {
			if w := serve(h, tt.remote, nil); w.Code != tt.want {
				t.Errorf("%s: status %d, want %d", tt.remote, w.Code, tt.want)
			}
		}
		if n := b.keys(); n != 5 {
			t.Errorf("the store holds %d keys, want 5", n)
		}
	})
}

// TestProxies: behind each proxy of docs/http.md, configured as shown
// there, a client that writes every forwarding header itself is keyed on
// the address its proxy wrote: rotating what it writes neither evades its
// limit nor draws on another client's.
func TestProxies(t *testing.T) {
	trusted := []string{"10.0.0.0/8"}
	// How each proxy passes on the client it saw, leaving alone the
	// headers it does not write.
	appendXFF := func(h http.Header, client string) { // nginx $proxy_add_x_forwarded_for, Envoy, ALB
		if prior := h.Values("X-Forwarded-For"); len(prior) > 0 {
			client = strings.Join(prior, ", ") + ", " + client
		}
		h.Set("X-Forwarded-For", client)
	}
	for _, p := range []struct {
		name    string
		header  string // ClientIPConfig.Header; "" is ClientIP's X-Forwarded-For
		forward func(h http.Header, client string)
	}{
		{"nginx, X-Forwarded-For", "", appendXFF},
		{"nginx, X-Real-IP only", "X-Real-IP", func(h http.Header, c string) { h.Set("X-Real-Ip", c) }},
		{"Envoy", "", appendXFF},
		{"HAProxy, option forwardfor", "", func(h http.Header, c string) { h.Add("X-Forwarded-For", c) }},
		{"HAProxy, option forwarded", "Forwarded", func(h http.Header, c string) { h.Add("Forwarded", "for="+c) }},
		{"Cloudflare", "CF-Connecting-IP", func(h http.Header, c string) {
			appendXFF(h, c)
			h.Set("Cf-Connecting-Ip", c)
		}},
		{"AWS ALB", "", appendXFF},
	} {
		t.Run(p.name, func(t *testing.T) {
			key := ClientIP(trusted...)
			if p.header != "" {
				var err error
				if key, err = NewClientIP(ClientIPConfig{TrustedProxies: trusted, Header: p.header}); err != nil {
					t.Fatal(err)
				}
			}
			backends(t, slow(5), nil, func(t *testing.T, b backend) {
				h := Middleware(b.lim, unhurried, WithKeyFunc(key))(okHandler)
				allowed := 0
				for i := range 50 {
					spoof := fmt.Sprintf("198.18.%d.%d", i/200, i%200+1)
					header := http.Header{
						"X-Forwarded-For":  {spoof},
						"X-Real-Ip":        {spoof},
						"Forwarded":        {"for=" + spoof},
						"Cf-Connecting-Ip": {spoof},
					}
					p.forward(header, "198.51.100.23")
					if k, err := key(request("10.1.2.3:4444", header)); err != nil || k != "ip:198.51.100.23" {
						t.Fatalf("headers %v: key %q, %v; want ip:198.51.100.23", header, k, err)
					}
					if w := serve(h, "10.1.2.3:4444", header); w.Code == http.StatusOK {
						allowed++
					}
				}
				if allowed != 5 {
					t.Errorf("%d requests allowed, want 5", allowed)
				}
				// Another client behind the same proxy has a bucket of its own.
				header := http.Header{}
				p.forward(header, "198.51.100.24")
				if w := serve(h, "10.1.2.3:4444", header); w.Code != http.StatusOK {
					t.Errorf("another client: status %d", w.Code)
				}
				if n := b.keys(); n != 2 {
					t.Errorf("the store holds %d keys, want 2", n)
				}
			})
		})
	}
}

// TestNoKey: requests that cannot be keyed or priced get 400, and never
// reach the store.
func TestNoKey(t *testing.T) {
	lim, store := memLimiter(t, slow(5))
	cost := func(r *http.Request) (int64, error) {
		if c := r.Header.Get("Cost"); c != "" {
			return strconv.ParseInt(c, 10, 64)
		}
		return 1, nil
	}
	apiKey := Middleware(lim, WithKeyFunc(HeaderKey("X-API-Key")), WithCostFunc(cost), WithLogger(quiet))(okHandler)
	for _, tt := range []struct {
		name   string
		h      http.Handler
		remote string
		header http.Header
	}{
		{"no header", apiKey, "203.0.113.7:1", nil},
		{"key too long", apiKey, "203.0.113.7:1", http.Header{"X-Api-Key": {string(bytes.Repeat([]byte("k"), ratekeeper.MaxKeyLen))}}},
		{"cost not a number", apiKey, "203.0.113.7:1", http.Header{"X-Api-Key": {"k"}, "Cost": {"lots"}}},
		{"negative cost", apiKey, "203.0.113.7:1", http.Header{"X-Api-Key": {"k"}, "Cost": {"-1"}}},
		{"cost above capacity", apiKey, "203.0.113.7:1", http.Header{"X-Api-Key": {"k"}, "Cost": {"6"}}},
		{"garbage RemoteAddr", Middleware(lim, WithLogger(quiet))(okHandler), "garbage", nil},
		{"empty key", Middleware(lim, WithLogger(quiet), WithKeyFunc(func(*http.Request) (string, error) { return "", nil }))(okHandler), "203.0.113.7:1", nil},
		{"garbage forwarded by a trusted proxy", Middleware(lim, WithLogger(quiet), WithKeyFunc(ClientIP("10.0.0.0/8")))(okHandler),
			"10.0.0.1:1", http.Header{"X-Forwarded-For": {"198.51.100.1, _hidden"}}},
	} {
		w := serve(tt.h, tt.remote, tt.header)
		if w.Code != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", tt.name, w.Code)
			continue
		}
		if p := decodeProblem(t, w); p["type"] != "about:blank" || p["title"] != "Bad Request" {
			t.Errorf("%s: problem %v", tt.name, p)
		}
	}
	if n := store.Len(); n != 0 {
		t.Errorf("the store holds %d keys, want 0", n)
	}

	unauthorized := Middleware(lim, WithKeyFunc(HeaderKey("X-API-Key")), WithLogger(quiet),
		WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusUnauthorized)
		}))(okHandler)
	if w := serve(unauthorized, "203.0.113.7:1", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("WithErrorHandler: status %d, want 401", w.Code)
	}
}

func TestCost(t *testing.T) {
	lim, _ := memLimiter(t, slow(5))
	cost := func(r *http.Request) (int64, error) { return strconv.ParseInt(r.Header.Get("Cost"), 10, 64) }
	h := Middleware(lim, WithCostFunc(cost))(okHandler)
	for _, tt := range []struct {
		cost, status int
		remaining    string
	}{{3, 200, "2"}, {3, 429, "2"}, {2, 200, "0"}, {0, 200, "0"}, {1, 429, "0"}} {
		w := serve(h, "203.0.113.7:1", http.Header{"Cost": {strconv.Itoa(tt.cost)}})
		if w.Code != tt.status || w.Header().Get("X-RateLimit-Remaining") != tt.remaining {
			t.Errorf("cost %d: %d, remaining %s; want %d, %s", tt.cost, w.Code, w.Header().Get("X-RateLimit-Remaining"), tt.status, tt.remaining)
		}
	}
}

// checkFailures runs one request through each failure policy against a
// failing limiter, and checks the answers, their speed, and the logs.
func checkFailures(t *testing.T, lim *ratekeeper.Limiter, timeout time.Duration) {
	t.Helper()
	const margin = time.Second
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, tt := range []struct {
		name   string
		opt    Option
		status int
	}{
		{"default", nil, http.StatusTeapot},
		{"FailOpen", FailOpen, http.StatusTeapot},
		{"FailClosed", FailClosed, http.StatusServiceUnavailable},
		{"custom", WithFailureHandler(func(w http.ResponseWriter, _ *http.Request, _ http.Handler, err error) {
			w.Header().Set("X-Failure", err.Error())
			w.WriteHeader(http.StatusBadGateway)
		}), http.StatusBadGateway},
	} {
		var logs testutil.SyncBuffer
		logger := slog.New(slog.NewJSONHandler(&logs, nil))
		h := Middleware(lim, tt.opt, WithStoreTimeout(timeout), WithLogger(logger))(served)
		start := time.Now()
		w := serve(h, "203.0.113.7:1", nil)
		if elapsed := time.Since(start); elapsed > timeout+margin {
			t.Errorf("%s: answered in %v, more than the timeout %v + %v", tt.name, elapsed, timeout, margin)
		}
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, w.Code, tt.status)
		}
		if tt.status == http.StatusServiceUnavailable {
			decodeProblem(t, w)
		}
		if w.Header().Get("RateLimit") != "" {
			t.Errorf("%s: RateLimit %q without a decision", tt.name, w.Header().Get("RateLimit"))
		}
		recs := logs.JSONRecords(t)
		if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["key"] != "ip:203.0.113.7" || recs[0]["err"] == "" {
			t.Errorf("%s: logged %v, want one error with the key and the error", tt.name, recs)
		}
	}
}

// hungStore never answers before its context ends, as a Store blocked on
// a peer that does not answer.
type hungStore struct{ release chan struct{} }

func (s hungStore) Decide(ctx context.Context, _ string, _ *driver.ValidSpec, _ int64) (driver.Decision, error) {
	select {
	case <-s.release:
		return driver.Decision{}, errors.New("released")
	case <-ctx.Done():
		return driver.Decision{}, ctx.Err()
	}
}

func (s hungStore) Reset(context.Context, string, *driver.ValidSpec) error { return nil }

func TestHungStore(t *testing.T) {
	s := hungStore{make(chan struct{})}
	defer close(s.release)
	checkFailures(t, newLimiter(t, s, slow(5)), 50*time.Millisecond)
}

// redisServer runs a redis-server of the test's own, which the test may
// stop or kill.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	once sync.Once
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		redistest.Skip(t, "redis-server is not on PATH")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	srv.cmd = exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := srv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.kill)
	client := redis.NewClient(&redis.Options{Addr: srv.addr})
	defer client.Close()
	for deadline := time.Now().Add(5 * time.Second); client.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", srv.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return srv
}

func (s *redisServer) kill() {
	s.once.Do(func() {
		s.cmd.Process.Signal(syscall.SIGCONT)
		s.cmd.Process.Kill()
		s.cmd.Wait()
	})
}

func redisLimiter(t *testing.T, addr string) *ratekeeper.Limiter {
	client := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { client.Close() })
	return newLimiter(t, redisstore.New(client), slow(5))
}

func TestRedisStopped(t *testing.T) {
	srv := startRedis(t)
	lim := redisLimiter(t, srv.addr)
	if w := serve(Middleware(lim)(okHandler), "203.0.113.7:1", nil); w.Code != http.StatusOK || w.Header().Get("RateLimit") == "" {
		t.Fatalf("with Redis up: status %d, RateLimit %q", w.Code, w.Header().Get("RateLimit"))
	}
	srv.kill()
	checkFailures(t, lim, 200*time.Millisecond)
}

// TestRedisHung: a Redis that accepts connections but never answers
// (stopped with SIGSTOP) holds no request beyond the store timeout.
func TestRedisHung(t *testing.T) {
	srv := startRedis(t)
	lim := redisLimiter(t, srv.addr)
	if w := serve(Middleware(lim)(okHandler), "203.0.113.7:1", nil); w.Code != http.StatusOK {
		t.Fatalf("with Redis up: status %d", w.Code)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	checkFailures(t, lim, 100*time.Millisecond)
}

func TestClientGone(t *testing.T) {
	s := hungStore{make(chan struct{})}
	defer close(s.release)
	var logs testutil.SyncBuffer
	h := Middleware(newLimiter(t, s, slow(5)), WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))(okHandler)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil))
	if w.Code != http.StatusOK || w.Body.Len() != 0 || logs.Len() != 0 {
		t.Errorf("a request whose client has gone got %d %q, logged %q; want nothing", w.Code, w.Body, logs.String())
	}
}

// windowless is a Policy defined outside ratekeeper whose Spec leaves the
// Window for validation to fill in: a fixed window of 5 per hour.
type windowless struct{}

func (windowless) Spec() (driver.Spec, error) {
	return driver.Spec{Algorithm: driver.AlgorithmFixedWindow, Limit: 5, MaxCost: 5,
		Params: driver.Params{Capacity: 5, Interval: time.Hour.Microseconds()}}, nil
}

// TestCustomPolicyWindow: the window that validation fills in for a
// policy that gives none is the one the headers advertise.
func TestCustomPolicyWindow(t *testing.T) {
	lim, _ := memLimiter(t, windowless{})
	w := serve(Middleware(lim)(okHandler), "203.0.113.7:1", nil)
	if got, want := w.Header().Get("RateLimit-Policy"), `"fixed_window";q=5;w=3600`; got != want {
		t.Errorf("RateLimit-Policy %s, want %s", got, want)
	}
}

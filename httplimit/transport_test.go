package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// remote is an API with a strict limit of its own: rate requests a
// second, all clients together, with a burst of burst. It counts what it
// served and what it denied.
type remote struct {
	*httptest.Server
	served, denied atomic.Int64
}

func newRemote(t *testing.T, rate, burst int64) *remote {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.GCRA{Rate: rate, Period: time.Second, Burst: burst})
	if err != nil {
		t.Fatal(err)
	}
	rm := &remote{}
	rm.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := lim.Allow(r.Context(), "all")
		if err != nil || !res.Allowed {
			rm.denied.Add(1)
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		rm.served.Add(1)
	}))
	t.Cleanup(rm.Close)
	return rm
}

// fleetEnv holds, in a child process of TestTransportFleet, what it is
// to do: "url prefix startUnixNano endUnixNano".
const fleetEnv = "HTTPLIMIT_TRANSPORT_FLEET"

const (
	fleetRate     = 100 // the remote's rate, and the fleet's, a second
	remoteBurst   = 10
	fleetBurst    = 5 // so that a late request loses no time; the remote allows more
	fleetProcs    = 4
	fleetWorkers  = 4 // goroutines sending in each process
	fleetDuration = 2 * time.Second
)

// TestTransportFleet: four processes, each with four goroutines sending
// as fast as their Transport lets them, share one limiter in Redis at the
// remote's rate, with half its burst: the remote denies none of their
// requests, and serves 95% or more of what it allows over the run (its
// burst and its rate).
func TestTransportFleet(t *testing.T) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		fleetChild(t, spec)
		return
	}
	redistest.Client(t) // skips without Redis
	rm := newRemote(t, fleetRate, remoteBurst)
	start := time.Now().Add(1500 * time.Millisecond)
	end := start.Add(fleetDuration)
	spec := fmt.Sprintf("%s %s %d %d", rm.URL, redistest.Prefix(t), start.UnixNano(), end.UnixNano())
	var wg sync.WaitGroup
	outs := make([][]byte, fleetProcs)
	errs := make([]error, fleetProcs)
	for i := range fleetProcs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTransportFleet$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fleetEnv+"="+spec)
		wg.Go(func() { outs[i], errs[i] = cmd.CombinedOutput() })
	}
	wg.Wait()
	var sent int64
	for i := range fleetProcs {
		if errs[i] != nil {
			t.Fatalf("child %d: %v\n%s", i, errs[i], outs[i])
		}
		var ok, denied int64
		if _, err := fmt.Sscanf(lineWith(string(outs[i]), "fleet:"), "fleet: ok=%d denied=%d", &ok, &denied); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, outs[i])
		}
		sent += ok + denied
	}
	served, denied := rm.served.Load(), rm.denied.Load()
	// What the remote allows over the run: its burst, and its rate.
	allowed := remoteBurst + fleetRate*fleetDuration.Seconds()
	share := float64(served) / allowed
	t.Logf("%d processes sent %d requests in %v: the remote served %d, denied %d; %.1f%% of what it allows (%.0f), %.1f%% of its rate alone",
		fleetProcs, sent, fleetDuration, served, denied, 100*share, allowed, 100*float64(served)/(fleetRate*fleetDuration.Seconds()))
	if denied != 0 || served != sent {
		t.Errorf("the remote denied %d of %d requests", denied, sent)
	}
	if share < 0.95 {
		t.Errorf("the fleet used %.1f%% of the remote's rate, want 95%% or more", 100*share)
	}
}

func lineWith(out, prefix string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, prefix) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// fleetChild is one process of the fleet: it sends from start to end
// through a Transport over the shared limiter, and prints what it got.
func fleetChild(t *testing.T, spec string) {
	var url, prefix string
	var startNano, endNano int64
	if _, err := fmt.Sscanf(spec, "%s %s %d %d", &url, &prefix, &startNano, &endNano); err != nil {
		t.Fatalf("%s=%q: %v", fleetEnv, spec, err)
	}
	store := redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(prefix))
	lim, err := ratekeeper.New(store, ratekeeper.GCRA{Rate: fleetRate, Period: time.Second, Burst: fleetBurst})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.Transport(lim, http.DefaultTransport, httplimit.PerHost())}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, endNano))
	defer cancel()
	time.Sleep(time.Until(time.Unix(0, startNano)))
	var ok, denied atomic.Int64
	var wg sync.WaitGroup
	for range fleetWorkers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fmt.Printf("\nfleet: ok=%d denied=%d\n", ok.Load(), denied.Load())
}

// TestTransportContext: a request whose context ends before the limiter
// admits it is not sent, and fails with the context's error.
func TestTransportContext(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, 1000, 1000)
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.FixedWindow{Limit: 1, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: httplimit.Transport(lim, nil, httplimit.FixedKey("api"))}
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rm.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(context.Background()); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := get(canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v, want context.Canceled", err)
	}
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := get(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline before the wait ends: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("deadline before the wait ends: returned after %v", d)
	}
	if n := rm.served.Load() + rm.denied.Load(); n != 1 {
		t.Errorf("the remote got %d requests, want 1", n)
	}
}

// TestTransportCost: the cost of a request is its CostFunc's, and an
// error of the CostFunc or the KeyFunc sends nothing.
func TestTransportCost(t *testing.T) {
	t.Parallel()
	rm := newRemote(t, 1000, 1000)
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.FixedWindow{Limit: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cost := httplimit.WithRequestCost(func(r *http.Request) (int64, error) {
		return strconv.ParseInt(r.Header.Get("Cost"), 10, 64)
	})
	client := &http.Client{Transport: httplimit.Transport(lim, nil, cost)}
	req, _ := http.NewRequest(http.MethodGet, rm.URL, nil)
	req.Header.Set("Cost", "7")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	res, err := lim.Peek(context.Background(), "host:"+req.URL.Host)
	if err != nil || res.Remaining != 3 {
		t.Errorf("after a request of cost 7 keyed per host: %+v, %v; want 3 remaining", res, err)
	}
	req.Header.Set("Cost", "x")
	if _, err := client.Do(req); err == nil {
		t.Error("a cost that cannot be parsed: nil error")
	}
	keyless := &http.Client{Transport: httplimit.Transport(lim, nil, httplimit.WithRequestKey(func(*http.Request) (string, error) {
		return "", errors.New("no key")
	}))}
	if _, err := keyless.Get(rm.URL); err == nil {
		t.Error("a key that cannot be derived: nil error")
	}
	if n := rm.served.Load() + rm.denied.Load(); n != 1 {
		t.Errorf("the remote got %d requests, want 1", n)
	}
}

// TestTransportRetryAfter: with WithRetryAfterCharge, a 429 or 503 with
// Retry-After drains the shared key until then, exactly; without it, or
// without Retry-After, the key is charged nothing more.
func TestTransportRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for _, tt := range []struct {
		name       string
		status     int
		retryAfter string
		charge     bool
		policy     ratekeeper.Policy
		want       time.Duration // the key's RetryAfter afterwards
		atLeast    time.Duration // if not 0, want is at most, and this at least
	}{
		{"429 seconds", 429, "2", true, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, 2 * time.Second, 0},
		{"503 seconds", 503, "1", true, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, time.Second, 0},
		// An HTTP-date is whole seconds, read against the time now.
		{"429 date", 429, time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat), true, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 5}, 3 * time.Second, 2 * time.Second},
		{"all", 429, "1", true, ratekeeper.All(
			ratekeeper.Named("fast", ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}),
			ratekeeper.Named("slow", ratekeeper.GCRA{Rate: 1000, Period: time.Hour, Burst: 1000})), time.Second, 0},
		{"not opted in", 429, "2", false, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, 0, 0},
		{"no Retry-After", 429, "", true, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, 0, 0},
		{"500", 500, "2", true, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			test := func(t *testing.T, store ratekeeper.Store) {
				lim, err := ratekeeper.New(store, tt.policy)
				if err != nil {
					t.Fatal(err)
				}
				opts := []httplimit.TransportOption{httplimit.FixedKey("api")}
				if tt.charge {
					opts = append(opts, httplimit.WithRetryAfterCharge())
				}
				client := &http.Client{Transport: httplimit.Transport(lim, nil, opts...)}
				resp, err := client.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d", resp.StatusCode)
				}
				res, err := lim.Peek(context.Background(), "api")
				switch {
				case err != nil:
					t.Fatal(err)
				case tt.atLeast == 0 && res.RetryAfter != tt.want:
					t.Errorf("the key afterwards: %+v; want RetryAfter %v", res, tt.want)
				case tt.atLeast != 0 && (res.RetryAfter < tt.atLeast || res.RetryAfter > tt.want):
					t.Errorf("the key afterwards: %+v; want RetryAfter from %v to %v", res, tt.atLeast, tt.want)
				}
			}
			clock := func() time.Time { return now }
			t.Run("memstore", func(t *testing.T) { test(t, memstore.New(memstore.WithClock(clock))) })
			t.Run("redis", func(t *testing.T) {
				test(t, redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(redistest.Prefix(t)), redisstore.WithClock(clock)))
			})
		})
	}
}

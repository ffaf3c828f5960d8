package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// failFast bounds a call failed at once without Redis: generous, for a
// loaded machine under the race detector; a call that tries Redis takes
// hundreds of milliseconds here.
const failFast = 50 * time.Millisecond

// untilUnreachable calls call until it fails with ErrUnreachable, for up
// to 3 s, and returns how long that call took, and its error.
func untilUnreachable(t *testing.T, call func(context.Context) error) (time.Duration, error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		err = call(ctx)
		elapsed := time.Since(start)
		cancel()
		if errors.Is(err, redisstore.ErrUnreachable) {
			return elapsed, err
		}
	}
	t.Fatalf("no ErrUnreachable within 3 s; last error: %v", err)
	return 0, nil
}

// TestBreakerRefused stops Redis: once a call has failed, decisions
// (DecideAll's too) and Resets fail at once with ErrUnreachable, which says so and wraps the
// refusal; once Redis is back, decisions resume.
func TestBreakerRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	store := redisstore.New(client)
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
	if _, err := lim.Allow(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	elapsed, err := untilUnreachable(t, func(ctx context.Context) error { _, err := lim.Allow(ctx, "k"); return err })
	if elapsed > failFast {
		t.Errorf("Allow with Redis unreachable took %v, want < %v", elapsed, failFast)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "Redis is unreachable") {
		t.Errorf("Allow with Redis down: %v; want it to say Redis is unreachable, and wrap the refusal", err)
	}
	if errors.Is(err, ratekeeper.ErrInvalidKey) || errors.Is(err, ratekeeper.ErrInvalidCost) {
		t.Errorf("Allow with Redis down: %v matches an input error; want a store failure", err)
	}
	start := time.Now()
	if err := lim.Reset(context.Background(), "k"); !errors.Is(err, redisstore.ErrUnreachable) || time.Since(start) > failFast {
		t.Errorf("Reset with Redis unreachable: %v after %v, want ErrUnreachable at once", err, time.Since(start))
	}
	start = time.Now()
	reqs := []driver.Request{{Key: "k", Spec: lim.Spec(), N: 1}, {Key: "j", Spec: lim.Spec(), N: 1}}
	if _, err := store.DecideAll(context.Background(), reqs); !errors.Is(err, redisstore.ErrUnreachable) || time.Since(start) > failFast {
		t.Errorf("DecideAll with Redis unreachable: %v after %v, want ErrUnreachable at once", err, time.Since(start))
	}

	srv.Restart()
	back := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := lim.Allow(ctx, "k")
		cancel()
		if err == nil {
			break
		}
		if time.Since(back) > 3*time.Second {
			t.Fatalf("no decision 3 s after Redis came back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("decisions resumed %v after Redis came back", time.Since(back))
}

// TestBreakerDeadHost: a host that never answers a dial (its dialer waits
// for the deadline, as for packets dropped on the way) is unreachable too.
func TestBreakerDeadHost(t *testing.T) {
	client := redis.NewClient(&redis.Options{
		Addr:        "192.0.2.1:6379", // TEST-NET-1: never routed
		DialTimeout: 100 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			<-ctx.Done()
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		},
	})
	t.Cleanup(func() { client.Close() })
	lim, _ := ratekeeper.New(redisstore.New(client), ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
	elapsed, _ := untilUnreachable(t, func(ctx context.Context) error { _, err := lim.Allow(ctx, "k"); return err })
	if elapsed > failFast {
		t.Errorf("Allow with the host gone took %v, want < %v", elapsed, failFast)
	}
}

// TestBreakerIgnoresRedisErrors: an error that Redis sends back for one
// request (WRONGTYPE here; OOM, NOSCRIPT alike) says nothing of its reach:
// other keys are decided as before.
func TestBreakerIgnoresRedisErrors(t *testing.T) {
	client := redistest.Client(t)
	store := redisstore.New(client, redisstore.WithKeyPrefix(redistest.Prefix(t)))
	lim, _ := ratekeeper.New(store, ratekeeper.GCRA{Rate: 10, Period: time.Second, Burst: 10})
	ctx := context.Background()
	if err := client.HSet(ctx, store.Key("bad", lim.Spec()), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := lim.Allow(ctx, "bad"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("Allow on a hash: %v, want WRONGTYPE", err)
		}
		time.Sleep(60 * time.Millisecond) // more than a probe's interval
		if _, err := lim.Allow(ctx, "good"); err != nil {
			t.Fatalf("Allow on another key after WRONGTYPE: %v", err)
		}
	}
}

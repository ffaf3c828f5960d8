package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestOutageFailsFast kills Redis under load from calls without a
// deadline, calls with a long one, and the FailOpen middleware, with and
// without auto-pipelining, on a go-redis client with its default
// settings. Once the first call has failed, later calls fail within a few
// milliseconds, with an error matching redisstore.ErrUnreachable, and the
// middleware fails open as fast; once Redis is back, decisions resume
// within a second. It logs the median time to fail and the time to
// recover.
func TestOutageFailsFast(t *testing.T) {
	for _, pipelining := range []bool{true, false} {
		t.Run(fmt.Sprint("pipelining=", pipelining), func(t *testing.T) {
			outageFailsFast(t, pipelining)
		})
	}
}

func outageFailsFast(t *testing.T, pipelining bool) {
	const (
		workers = 12
		outage  = 3 * time.Second
		// settle: after the first failure, the time the store may take to
		// find that Redis is unreachable (a probe is bounded at 250 ms).
		settle = 500 * time.Millisecond
		// fast: what "within a few milliseconds" must stay under, for the
		// median, on a machine loaded with other tests and the race
		// detector. A call that waits for Redis takes hundreds.
		fast = 50 * time.Millisecond
	)
	srv := redistest.StartServer(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr}) // go-redis's defaults
	t.Cleanup(func() { client.Close() })
	lim := newLimiter(t, redisstore.New(client, redisstore.WithAutoPipelining(pipelining)),
		ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 1000})
	h := httplimit.Middleware(lim, httplimit.FailOpen, httplimit.WithStoreTimeout(time.Second),
		httplimit.WithLogger(quiet))(served)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := lim.Allow(ctx, "warm"); err != nil {
		t.Fatal(err)
	}

	type failure struct {
		start, end time.Time
		err        error // nil for the middleware's
	}
	var (
		mu        sync.Mutex
		failures  []failure
		firstFail atomic.Int64 // when the first call failed, in Unix ns
		resumed   atomic.Int64 // when the first decision after the restart ended
		restarted atomic.Int64 // when Redis answered again
		stop      atomic.Bool
		wg        sync.WaitGroup
	)
	record := func(start time.Time, ok bool, err error) {
		end := time.Now()
		if ok {
			if restarted.Load() != 0 {
				resumed.CompareAndSwap(0, end.UnixNano())
			}
			return
		}
		firstFail.CompareAndSwap(0, end.UnixNano())
		mu.Lock()
		failures = append(failures, failure{start, end, err})
		mu.Unlock()
	}
	for i := range workers {
		wg.Go(func() {
			for !stop.Load() {
				start := time.Now()
				switch i % 3 {
				case 0: // no deadline: go-redis's own timeouts and retries
					_, err := lim.Allow(context.Background(), fmt.Sprint("w", i))
					record(start, err == nil, err)
				case 1: // a long deadline, as a demo page's
					callCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := lim.Allow(callCtx, fmt.Sprint("w", i))
					cancel()
					record(start, err == nil, err)
				default: // the middleware, failing open
					w, _ := serve(h, i)
					record(start, classify(w) == decided, nil)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}

	time.Sleep(200 * time.Millisecond)
	srv.Stop()
	killed := time.Now()
	time.Sleep(outage)
	srv.Restart()
	back := time.Now()
	restarted.Store(back.UnixNano())
	for deadline := back.Add(5 * time.Second); resumed.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	if firstFail.Load() == 0 {
		t.Fatal("no call failed while Redis was down")
	}
	first := time.Unix(0, firstFail.Load())
	var durations []time.Duration
	var unreachable, others int
	for _, f := range failures {
		if f.start.Before(first.Add(settle)) || f.end.After(back) {
			continue
		}
		durations = append(durations, f.end.Sub(f.start))
		switch {
		case f.err == nil:
		case errors.Is(f.err, redisstore.ErrUnreachable):
			unreachable++
		default:
			if others++; others <= 3 {
				t.Logf("a call failed otherwise: %v", f.err)
			}
		}
	}
	if len(durations) == 0 {
		t.Fatalf("no call started more than %v after the first failure (%v after the kill) and ended while Redis was down",
			settle, first.Sub(killed))
	}
	slices.Sort(durations)
	median, p99 := durations[len(durations)/2], durations[len(durations)*99/100]
	t.Logf("first failure %v after the kill; then %d failed calls: median %v, 99th percentile %v, slowest %v; %d matched ErrUnreachable, %d other errors",
		first.Sub(killed), len(durations), median, p99, durations[len(durations)-1], unreachable, others)
	if median > fast {
		t.Errorf("median time to fail while Redis was down: %v, want a few milliseconds (< %v)", median, fast)
	}
	if unreachable == 0 {
		t.Error("no call failed with ErrUnreachable while Redis was down")
	}
	if resumed.Load() == 0 {
		t.Fatal("no decision within 5 s of Redis coming back")
	}
	recovery := time.Unix(0, resumed.Load()).Sub(back)
	t.Logf("decisions resumed %v after Redis answered again", recovery)
	// go-redis, after PoolSize failed dials, dials only once a second:
	// allow it that, and a margin for a loaded machine.
	if recovery > time.Second+margin {
		t.Errorf("decisions resumed %v after Redis answered again, want within about a second", recovery)
	}
}

package leasetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestMain says how many tests skipped for want of Redis.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		holderChild()
		return
	}
	os.Exit(redistest.Run(m))
}

const ttl = 50 * time.Millisecond

// TestLeasesKeepTheBound: 8 Limiters with leases on one key, each over
// its own client, with uneven demand (1:1:1:1:2:2:4:8, Poisson arrivals)
// of twice the policy's rate, beside a Limiter without leases: no window
// admits more than the policy's bound, the fleet admits at least 95% of
// the rate (on a busy machine, at most 5 points less than without
// leases), and no Limiter with leases that was denied waits for its next
// admission longer than a TTL. A fixed window spent before its end denies
// everyone until then, with leases or without: there, and for the
// Limiter without leases, the wait is at most a TTL beyond the longest
// wait of a Limiter of the same demand in a fleet without leases.
func TestLeasesKeepTheBound(t *testing.T) {
	stores := map[string]func(t *testing.T) redis.UniversalClient{
		"redis":         func(t *testing.T) redis.UniversalClient { return redistest.Client(t) },
		"redis-cluster": func(t *testing.T) redis.UniversalClient { return redistest.ClusterClient(t) },
	}
	for name, client := range stores {
		for _, c := range Cases {
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				open := func() ratekeeper.Store {
					return redisstore.New(client(t), redisstore.WithKeyPrefix(prefix))
				}
				// The share of the rate admitted: 95%, or, on a machine
				// too busy for the fleet without leases to reach it, no
				// more than 5 points below that fleet's.
				if testing.Short() {
					// The bound; the share and the waits are measured
					// alone (make test).
					Run(t, c, "hot", open, Options{TTL: ttl})
					return
				}
				plain := Run(t, c, "plain", open, Options{MinShare: -1})
				leased := Run(t, c, "hot", open, Options{TTL: ttl, MinShare: -1})
				if want := min(0.95, plain.Share-0.05); leased.Share < want && leased.Offered >= 1.5 {
					t.Errorf("with leases the fleet admitted %.1f%% of the rate, without %.1f%%; want at least %.1f%%",
						100*leased.Share, 100*plain.Share, 100*want)
				}
				for i := range leased.Starved {
					if c.Gaps || i == len(Weights)-1 {
						if leased.Starved[i] > plain.Starved[i]+ttl || leased.Admitted[i] == 0 {
							t.Errorf("Limiter %d, denied, waited up to %v for an admission (%d admitted); without leases up to %v",
								i, leased.Starved[i], leased.Admitted[i], plain.Starved[i])
						}
						continue
					}
					if leased.Starved[i] > ttl || leased.Admitted[i] == 0 {
						t.Errorf("Limiter %d, denied, waited up to %v for an admission (%d admitted); without leases up to %v",
							i, leased.Starved[i], leased.Admitted[i], plain.Starved[i])
					}
				}
			})
		}
	}
}

// TestLeasesRedisPaused: Redis stops answering for a TTL while the fleet
// runs, at 80% of the rate, each request bounded by 20ms. The Limiters
// spend what their leases hold, then fail, and the bound holds
// throughout.
func TestLeasesRedisPaused(t *testing.T) {
	srv := redistest.StartServer(t)
	c := Cases[0]
	open := func() ratekeeper.Store { return redisstore.New(srv.Client()) }
	var paused, resumed time.Time
	pause := time.AfterFunc(500*time.Millisecond, func() {
		srv.Pause()
		paused = time.Now()
		time.Sleep(ttl)
		resumed = time.Now()
		srv.Resume()
	})
	defer pause.Stop()
	// Demand within the rate, so that leases hold something.
	f := Run(t, c, "hot", open, Options{TTL: ttl, Timeout: 20 * time.Millisecond, Demand: 0.8, MinShare: 0.7,
		Errors: func(err error) bool { return errors.Is(err, context.DeadlineExceeded) }})
	// Admitted while Redis answered nothing: from leases.
	var during int
	for _, a := range f.All {
		if a.Lo > paused.UnixMicro() && a.Hi < resumed.UnixMicro() {
			during++
		}
	}
	t.Logf("%d admitted from leases while Redis was paused for %v", during, resumed.Sub(paused))
	if during == 0 {
		t.Errorf("nothing admitted while Redis was paused: the leases were not spent")
	}
}

const childEnv = "RATEKEEPER_LEASE_HOLDER"

// TestLeaseHolderKilled: a holder in a child process takes leases of 300ms
// on the fleet's key, and is killed mid-lease. Its admissions, read from
// its output until it died, and the fleet's keep the bound together; the
// fleet gets the whole rate back once the dead holder's lease has expired.
func TestLeaseHolderKilled(t *testing.T) {
	const holderTTL = 300 * time.Millisecond
	c := Cases[0]
	prefix := redistest.Prefix(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%v", childEnv, redistest.Addr(t), prefix, holderTTL))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child []Admission
	read := make(chan struct{})
	go func() {
		defer close(read)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			var a Admission
			if _, err := fmt.Sscan(lines.Text(), &a.Lo, &a.Hi); err == nil {
				child = append(child, a)
			}
		}
	}()
	var killed time.Time
	kill := time.AfterFunc(400*time.Millisecond, func() {
		killed = time.Now()
		cmd.Process.Kill()
	})
	defer kill.Stop()
	open := func() ratekeeper.Store { return redisstore.New(redistest.Client(t), redisstore.WithKeyPrefix(prefix)) }
	// The fleet shares the rate with the holder.
	f := Run(t, c, "hot", open, Options{TTL: ttl, Duration: 1500 * time.Millisecond, MinShare: 0.5})
	<-read
	cmd.Wait()
	if len(child) == 0 {
		t.Fatal("the holder admitted nothing before it was killed")
	}
	Check(t, c, append(f.All, child...))
	// The whole rate, from a TTL after the kill on.
	from := killed.Add(holderTTL + ttl).UnixMicro()
	var after int
	var end int64
	for _, a := range f.All {
		if a.Lo >= from {
			after++
		}
		end = max(end, a.Hi)
	}
	share := float64(after) / (c.Rate * float64(end-from) / 1e6)
	t.Logf("the holder admitted %d; after its lease expired, the fleet admitted %.1f%% of the rate", len(child), 100*share)
	if share < 0.9 && f.Offered >= 1.5 && !testing.Short() {
		t.Errorf("after the dead holder's lease expired, the fleet admitted %.1f%% of the rate", 100*share)
	}
}

// holderChild is TestLeaseHolderKilled's holder: it takes leases on "hot"
// and prints each admission, until it is killed.
func holderChild() {
	parts := strings.Split(os.Getenv(childEnv), ",")
	holderTTL, _ := time.ParseDuration(parts[2])
	store := redisstore.New(redis.NewClient(&redis.Options{Addr: parts[0]}), redisstore.WithKeyPrefix(parts[1]))
	lim, err := ratekeeper.New(store, Cases[0].Policy, ratekeeper.WithLeases(ratekeeper.Leases{TTL: holderTTL}))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for next := time.Now(); ; next = next.Add(time.Millisecond) {
		time.Sleep(time.Until(next))
		lo := time.Now()
		res, err := lim.Allow(context.Background(), "hot")
		hi := time.Now()
		if err == nil && res.Allowed {
			fmt.Fprintln(w, lo.UnixMicro(), hi.UnixMicro())
			w.Flush()
		}
	}
}

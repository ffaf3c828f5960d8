package redisstore_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// commandCalls reads INFO commandstats: how many times each of the
// script commands ran.
func commandCalls(t *testing.T, client *redis.Client) map[string]int {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, m := range regexp.MustCompile(`cmdstat_(fcall|evalsha|eval|function\|load):calls=(\d+)`).FindAllStringSubmatch(info, -1) {
		calls[m[1]], _ = strconv.Atoi(m[2])
	}
	return calls
}

// TestFunctions: decisions go by FCALL, their library loaded by the first
// call that finds it missing, on a new server and after FUNCTION FLUSH;
// each such call goes once more by EVALSHA (and EVAL), and decides right.
func TestFunctions(t *testing.T) {
	for _, pipelining := range []bool{false, true} {
		t.Run("pipelining="+strconv.FormatBool(pipelining), func(t *testing.T) {
			client := redistest.StartServer(t).Client()
			ctx := context.Background()
			lim, err := ratekeeper.New(redisstore.New(client, redisstore.WithAutoPipelining(pipelining)),
				ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			for round, flush := range []bool{false, true} {
				if flush {
					if err := client.FunctionFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				client.ConfigResetStat(ctx)
				for i := range 10 {
					res, err := lim.Allow(ctx, "k")
					if want := float64(100 - 10*round - i - 1); err != nil || !res.Allowed || res.Remaining != want {
						t.Fatalf("flush=%v: decision %d: %+v, %v; want %v remaining", flush, i, res, err, want)
					}
				}
				calls := commandCalls(t, client)
				if calls["fcall"] != 10 || calls["function|load"] != 1 || calls["evalsha"] != 1 {
					t.Errorf("flush=%v: 10 decisions made %v; want 10 FCALL, 1 FUNCTION LOAD, then 1 EVALSHA for the first", flush, calls)
				}
			}
		})
	}
}

// TestFunctionsRefused: a user whom an ACL denies FCALL decides by
// EVALSHA, after one refusal.
func TestFunctionsRefused(t *testing.T) {
	srv := redistest.StartServer(t)
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "nofunctions", "on", ">secret", "~*", "+@all", "-fcall", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: "nofunctions", Password: "secret"})
	t.Cleanup(func() { client.Close() })
	lim, err := ratekeeper.New(redisstore.New(client), ratekeeper.TokenBucket{Capacity: 100, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	admin.ConfigResetStat(ctx)
	for i := range 10 {
		if res, err := lim.Allow(ctx, "k"); err != nil || res.Remaining != float64(99-i) {
			t.Fatalf("decision %d: %+v, %v", i, res, err)
		}
	}
	if calls := commandCalls(t, admin); calls["fcall"] != 0 || calls["evalsha"] != 10 {
		t.Errorf("10 decisions by a user denied FCALL made %v; want 10 EVALSHA", calls)
	}
}

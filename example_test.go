package ratekeeper_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func ExampleNew() {
	// Bursts of up to 10 requests, refilled at 1 request per second. With
	// redisstore.New(client) instead of memstore.New(), the limit is shared
	// by every server using that Redis.
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		panic(err)
	}
	res, err := lim.Allow(context.Background(), "user:123")
	if err != nil {
		panic(err) // the store failed: decide whether to fail open or closed
	}
	fmt.Println(res.Allowed, res.Remaining, res.Limit)
	// Output: true 9 10
}

func ExampleNew_invalidPolicy() {
	_, err := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 0, RefillInterval: time.Second})
	fmt.Println(err)
	// Output: ratekeeper: invalid policy: TokenBucket RefillRate must be a positive finite number, got 0
}

func ExampleLimiter_Allow() {
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 3, RefillRate: 1, RefillInterval: time.Hour})
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		res, _ := lim.Allow(ctx, "ip:203.0.113.7")
		if res.Allowed {
			fmt.Printf("allowed, %v left\n", res.Remaining)
		} else {
			fmt.Printf("denied, retry in %v\n", res.RetryAfter.Round(time.Minute))
		}
	}
	// Output:
	// allowed, 2 left
	// allowed, 1 left
	// allowed, 0 left
	// denied, retry in 1h0m0s
}

func ExampleLimiter_AllowN() {
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Hour})
	ctx := context.Background()

	res, _ := lim.AllowN(ctx, "batch:42", 7)
	fmt.Println("cost 7:", res.Allowed, res.Remaining)
	res, _ = lim.AllowN(ctx, "batch:42", 5) // all or nothing: takes nothing
	fmt.Println("cost 5:", res.Allowed, res.Remaining)
	_, err := lim.AllowN(ctx, "batch:42", 11) // can never pass
	fmt.Println(err)
	// Output:
	// cost 7: true 3
	// cost 5: false 3
	// ratekeeper: cost 11 can never be admitted: the policy admits at most 10 at once
}

func ExampleLimiter_Wait() {
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 1, RefillRate: 1, RefillInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := lim.Wait(ctx, "job"); err != nil {
			panic(err)
		}
	}
	// The first passes at once, each other one waits for its refill.
	fmt.Println(time.Since(start) >= 40*time.Millisecond)
	// Output: true
}

func ExampleLimiter_Peek() {
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 2, RefillRate: 0.5, RefillInterval: time.Minute})
	ctx := context.Background()
	lim.Allow(ctx, "user:7")
	lim.Allow(ctx, "user:7")
	res, _ := lim.Peek(ctx, "user:7") // consumes nothing
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter.Round(time.Second), res.ResetAfter.Round(time.Second))
	// Output: false 0 2m0s 4m0s
}

func ExampleAll() {
	// 2 requests per second and 5 per minute, decided together: a request
	// denied by one policy takes nothing from the other.
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.All(
		ratekeeper.Named("second", ratekeeper.GCRA{Rate: 2, Period: time.Second, Burst: 2}),
		ratekeeper.Named("minute", ratekeeper.FixedWindow{Limit: 5, Window: time.Minute}),
	))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, _ := lim.Allow(ctx, "user:123")
		fmt.Printf("allowed=%v binding=%s remaining=%v", res.Allowed, res.Policy, res.Remaining)
		for _, p := range res.Parts {
			fmt.Printf(" | %s: %v left", p.Policy, p.Remaining)
		}
		fmt.Println()
	}
	// Output:
	// allowed=true binding=second remaining=1 | second: 1 left | minute: 4 left
	// allowed=true binding=second remaining=0 | second: 0 left | minute: 3 left
	// allowed=false binding=second remaining=0 | second: 0 left | minute: 3 left
}

func ExampleLimiter_Charge() {
	// A budget of 1,000 LLM tokens per user, refilled at 1,000 per hour.
	// The tokens a response uses are known only once it is done.
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.TokenBucket{
		Capacity: 1000, RefillRate: 1000, RefillInterval: time.Hour})
	ctx := context.Background()

	res, _ := lim.Peek(ctx, "user:7") // before the call: is there budget?
	fmt.Println(res.Allowed, res.Remaining)

	res, _ = lim.Charge(ctx, "user:7", 1500) // after it: 1,500 used
	fmt.Println(res.Allowed, res.Remaining, res.RetryAfter)

	res, _ = lim.Peek(ctx, "user:7") // denied until the debt is repaid
	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// true 1000
	// false -500 1h0m0s
	// false -500
}

func ExampleLimiter_Refund() {
	// Reserve a cost up front, then give back what was not used.
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.FixedWindow{Limit: 100, Window: time.Minute})
	ctx := context.Background()

	res, _ := lim.AllowN(ctx, "job:9", 40) // reserved
	fmt.Println(res.Allowed, res.Remaining)

	res, _ = lim.Refund(ctx, "job:9", 25) // 15 used
	fmt.Println(res.Remaining)

	res, _ = lim.Refund(ctx, "job:9", 1000) // never beyond full
	fmt.Println(res.Remaining)
	// Output:
	// true 60
	// 85
	// 100
}

// A hot key decided in process from leases: the store sees a lease step
// per lease, not a call per request, and the key's bound is kept across
// every Limiter that shares it.
func ExampleWithLeases() {
	store := memstore.New()
	defer store.Close()
	lim, err := ratekeeper.New(store,
		ratekeeper.GCRA{Rate: 1000, Period: time.Second, Burst: 100},
		ratekeeper.WithLeases(ratekeeper.Leases{TTL: 50 * time.Millisecond}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lim.Close() // gives back what its leases hold

	ctx := context.Background()
	allowed := 0
	for range 60 {
		if res, err := lim.Allow(ctx, "global:api"); err == nil && res.Allowed {
			allowed++
		}
	}
	fmt.Println("allowed:", allowed)
	// Output: allowed: 60
}

func ExampleLimiter_Reserve() {
	// A budget of 10,000 tokens a minute for a language model's answers,
	// whose size is known only once they are written.
	lim, _ := ratekeeper.New(memstore.New(), ratekeeper.FixedWindow{Limit: 10000, Window: time.Minute})
	ctx := context.Background()

	r, err := lim.Reserve(ctx, "tenant:7", 1000) // the most an answer may use
	if err != nil {
		panic(err)
	}
	if !r.Result().Allowed {
		fmt.Println("denied, retry in", r.Result().RetryAfter)
		return
	}
	fmt.Println("reserved, left:", r.Result().Remaining)
	used := int64(640) // the tokens the answer took
	res, _ := r.Settle(ctx, used)
	fmt.Println("settled, left:", res.Remaining)
	_, err = r.Settle(ctx, used)
	fmt.Println(err)
	// Output:
	// reserved, left: 9000
	// settled, left: 9360
	// ratekeeper: reservation already settled
}

func ExampleNewConcurrency() {
	// At most 2 exports running per tenant, across every server sharing
	// the store (redisstore.New(client) for a fleet).
	sem, err := ratekeeper.NewConcurrency(memstore.New(), ratekeeper.Concurrency{Limit: 2, TTL: 30 * time.Second})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	release1, _ := sem.Acquire(ctx, "tenant:7")
	release2, _ := sem.Acquire(ctx, "tenant:7")
	_, err = sem.TryAcquire(ctx, "tenant:7")
	fmt.Println(err)
	release1()
	release3, err := sem.TryAcquire(ctx, "tenant:7")
	fmt.Println(err)
	release2()
	release3()
	// Output:
	// ratekeeper: every in-flight slot is held: 2 of 2 held for "tenant:7"
	// <nil>
}

package memstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func ExampleNew() {
	store := memstore.New()
	defer store.Close()

	// One token an hour: nothing refills while the example runs.
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	res, _ := lim.Allow(ctx, "user:123")
	fmt.Println("Allow:", res.Allowed, res.Remaining)
	res, _ = lim.AllowN(ctx, "user:123", 5)
	fmt.Println("AllowN(5):", res.Allowed, res.Remaining)
	res, _ = lim.AllowN(ctx, "user:123", 5)
	fmt.Println("AllowN(5):", res.Allowed, res.Remaining, "retry after", res.RetryAfter.Round(time.Minute))
	res, _ = lim.Peek(ctx, "user:123")
	fmt.Println("Peek:", res.Allowed, res.Remaining)
	// Output:
	// Allow: true 9
	// AllowN(5): true 4
	// AllowN(5): false 4 retry after 1h0m0s
	// Peek: true 4
}

func ExampleWithMaxKeys() {
	store := memstore.New(memstore.WithMaxKeys(1000))
	defer store.Close()
	lim, err := ratekeeper.New(store, ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Far more callers than the store holds: each new one evicts a key
	// that will be full again soon, so memory stays bounded.
	for i := range 10_000 {
		lim.Allow(ctx, fmt.Sprint("user:", i))
	}
	fmt.Println("bound:", store.MaxKeys())
	fmt.Println("within bound:", store.Len() <= store.MaxKeys())
	fmt.Println("evicted:", store.Evictions() > 0)
	// Output:
	// bound: 1000
	// within bound: true
	// evicted: true
}

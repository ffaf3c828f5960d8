package redisstore_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()

	// Every application server sharing this Redis shares the limit.
	lim, err := ratekeeper.New(redisstore.New(client), ratekeeper.TokenBucket{
		Capacity: 10, RefillRate: 1, RefillInterval: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	res, err := lim.Allow(context.Background(), "user:123")
	if err != nil {
		log.Fatal(err)
	}
	if res.Allowed {
		fmt.Printf("allowed, %g left\n", res.Remaining)
	} else {
		fmt.Printf("denied, retry in %v\n", res.RetryAfter)
	}
}

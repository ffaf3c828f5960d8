package ratekeeper_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func newSem(t *testing.T, c ratekeeper.Concurrency) *ratekeeper.Semaphore {
	t.Helper()
	store := memstore.New(memstore.WithSweepInterval(0))
	sem, err := ratekeeper.NewConcurrency(store, c)
	if err != nil {
		t.Fatal(err)
	}
	return sem
}

// Waiters of one Semaphore get their slots in the order they came, and a
// TryAcquire does not overtake them.
func TestSemaphoreFIFO(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sem := newSem(t, ratekeeper.Concurrency{Limit: 1, TTL: time.Minute})
	release, err := sem.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 8
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	for i := range waiters {
		wg.Go(func() {
			rel, err := sem.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			rel()
		})
		// The next one comes once this one waits.
		for sem.Waiting("k") != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	if _, err := sem.TryAcquire(ctx, "k"); !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Errorf("TryAcquire with waiters: %v, want ErrNoSlots", err)
	}
	release()
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("slots went to the waiters in the order %v, want first come first served", order)
		}
	}
	if len(order) != waiters || sem.Waiting("k") != 0 {
		t.Fatalf("%d of %d waiters served, %d still waiting", len(order), waiters, sem.Waiting("k"))
	}
}

// Acquire waits no longer than its context; a waiter that gives up
// leaves the queue.
func TestSemaphoreContextBoundsWait(t *testing.T) {
	t.Parallel()
	sem := newSem(t, ratekeeper.Concurrency{Limit: 1, TTL: time.Minute})
	release, err := sem.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := sem.Acquire(ctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with every slot held: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Acquire waited %v past its deadline", d)
	}
	if n := sem.Waiting("k"); n != 0 {
		t.Errorf("%d still waiting after giving up", n)
	}
	release()
	if rel, err := sem.TryAcquire(context.Background(), "k"); err != nil {
		t.Errorf("TryAcquire after the release: %v", err)
	} else {
		rel()
	}
}

// A held slot outlives its TTL: the Semaphore renews it in the
// background until it is released.
func TestSemaphoreRenews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sem := newSem(t, ratekeeper.Concurrency{Limit: 1, TTL: 60 * time.Millisecond})
	release, err := sem.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	if _, err := sem.TryAcquire(ctx, "k"); !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Fatalf("TryAcquire 4 TTLs into a held slot: %v, want ErrNoSlots", err)
	}
	release()
	if _, err := sem.TryAcquire(ctx, "k"); err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
}

// NewConcurrency refuses what it cannot run.
func TestNewConcurrencyErrors(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.WithSweepInterval(0))
	for _, c := range []ratekeeper.Concurrency{
		{Limit: 0},
		{Limit: ratekeeper.MaxSlots + 1},
		{Limit: 1, TTL: time.Millisecond},
		{Limit: 1, TTL: ratekeeper.MaxSlotTTL + time.Second},
		{Limit: 1, TTL: time.Second + time.Nanosecond},
		{Limit: 1, Name: "bad\x00name"},
	} {
		if _, err := ratekeeper.NewConcurrency(store, c); !errors.Is(err, ratekeeper.ErrInvalidPolicy) {
			t.Errorf("NewConcurrency(%+v): %v, want ErrInvalidPolicy", c, err)
		}
	}
	if _, err := ratekeeper.NewConcurrency(decideOnly{store}, ratekeeper.Concurrency{Limit: 1}); !errors.Is(err, ratekeeper.ErrNoSlotStore) {
		t.Errorf("NewConcurrency on a store without slots: %v, want ErrNoSlotStore", err)
	}
	sem, err := ratekeeper.NewConcurrency(store, ratekeeper.Concurrency{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.Acquire(context.Background(), ""); !errors.Is(err, ratekeeper.ErrInvalidKey) {
		t.Errorf("Acquire with no key: %v, want ErrInvalidKey", err)
	}
}

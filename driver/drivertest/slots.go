package drivertest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/driver"
	"github.com/ratekeeper/ratekeeper/internal/testutil"
)

// SharedEnv is set, in the child processes the suite starts to test
// in-flight slots across processes, to a string unique to the parent's
// test: open must then return, in every child given the same string, a
// store over the same state (for a Redis store, keys under a prefix made
// of it). A store whose state is not shared between processes (memstore)
// ignores it, and the test skips.
const SharedEnv = "DRIVERTEST_SHARED"

// slotRoleEnv tells a child process of testSlotsKilledHolder what to do:
// "hold" a slot until killed, or "watch" it come back.
const slotRoleEnv = "DRIVERTEST_SLOT_ROLE"

// slotKilledTTL is the TTL of the slot a child holds until it is killed.
const slotKilledTTL = time.Second

// forEachSlots runs f on a fresh store that holds in-flight slots, and
// the clock it reads; it skips t when the store is no driver.Slots.
func (ts *suite) forEachSlots(t *testing.T, f func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store)) {
	clock := newClock()
	store := ts.open(t, clock.Now)
	if _, ok := store.(driver.Slots); !ok {
		t.Skip("the store is no driver.Slots: it holds no in-flight slots")
	}
	f(t, clock, store)
}

func newSemaphore(t *testing.T, store ratekeeper.Store, c ratekeeper.Concurrency) *ratekeeper.Semaphore {
	t.Helper()
	sem, err := ratekeeper.NewConcurrency(store, c)
	if err != nil {
		t.Fatal(err)
	}
	return sem
}

// testSlotsNeverMoreThanLimit: many goroutines over three Semaphores (as
// three processes would be) acquire and release the slots of one key: no
// more than Limit ever hold one at once, and Limit do.
func (ts *suite) testSlotsNeverMoreThanLimit(t *testing.T) {
	ts.forEachSlots(t, func(t *testing.T, _ *testutil.Clock, store ratekeeper.Store) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		const limit, rounds = 3, 8
		key := "inflight-" + randomHex()
		var sems []*ratekeeper.Semaphore
		for range 3 {
			sems = append(sems, newSemaphore(t, store, ratekeeper.Concurrency{Limit: limit, TTL: time.Minute, Name: "drivertest"}))
		}
		var (
			holding, most, acquired atomic.Int64
			wg                      sync.WaitGroup
		)
		for g := range 12 {
			wg.Go(func() {
				sem := sems[g%len(sems)]
				for range rounds {
					release, err := sem.Acquire(ctx, key)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					n := holding.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					acquired.Add(1)
					time.Sleep(time.Millisecond)
					holding.Add(-1)
					release()
				}
			})
		}
		wg.Wait()
		if most.Load() > limit {
			t.Errorf("%d held a slot at once, more than the limit %d", most.Load(), limit)
		}
		if most.Load() < limit || acquired.Load() != 12*rounds {
			t.Errorf("at most %d held at once, %d acquisitions of %d: the race never filled the limit", most.Load(), acquired.Load(), 12*rounds)
		}
		// Every slot was given back.
		for i := range limit {
			if _, err := sems[0].TryAcquire(ctx, key); err != nil {
				t.Fatalf("TryAcquire %d after every release: %v", i, err)
			}
		}
		if _, err := sems[1].TryAcquire(ctx, key); !errors.Is(err, ratekeeper.ErrNoSlots) {
			t.Fatalf("TryAcquire beyond the limit: %v, want ErrNoSlots", err)
		}
	})
}

// testSlotsExpire: a slot never renewed nor released (its holder
// crashed) is free exactly TTL after it was taken, on the store's clock;
// until then the others wait, and are told how long.
func (ts *suite) testSlotsExpire(t *testing.T) {
	ts.forEachSlots(t, func(t *testing.T, clock *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		slots := store.(driver.Slots)
		spec := driver.SlotSpec{Name: "drivertest", Limit: 2, TTL: 1_000_000}
		key := "crashed-" + randomHex()
		for _, h := range []string{"crashed1", "crashed2"} {
			if g, err := slots.AcquireSlot(ctx, key, spec, h); err != nil || !g.Acquired {
				t.Fatalf("AcquireSlot(%s) = %+v, %v", h, g, err)
			}
			clock.Advance(100 * time.Millisecond)
		}
		// The same holder again keeps its slot, counted once.
		if g, err := slots.AcquireSlot(ctx, key, spec, "crashed2"); err != nil || !g.Acquired || g.Held != 2 {
			t.Fatalf("AcquireSlot of a holder again = %+v, %v; want acquired, 2 held", g, err)
		}
		// The first lease ends 1 s after it was taken, 200 ms ago.
		if g, err := slots.AcquireSlot(ctx, key, spec, "waiter"); err != nil || g.Acquired || g.Held != 2 || g.RetryAfter != 800_000 {
			t.Fatalf("AcquireSlot with both held = %+v, %v; want 2 held, retry after 800000µs", g, err)
		}
		clock.Advance(800*time.Millisecond - time.Microsecond)
		if g, err := slots.AcquireSlot(ctx, key, spec, "waiter"); err != nil || g.Acquired || g.RetryAfter != 1 {
			t.Fatalf("AcquireSlot 1µs before the first lease ends = %+v, %v; want retry after 1µs", g, err)
		}
		clock.Advance(time.Microsecond)
		if g, err := slots.AcquireSlot(ctx, key, spec, "waiter"); err != nil || !g.Acquired || g.Held != 2 {
			t.Fatalf("AcquireSlot once the first lease ended = %+v, %v; want acquired, 2 held", g, err)
		}
		if ok, err := slots.RenewSlot(ctx, key, spec, "crashed1"); err != nil || ok {
			t.Fatalf("RenewSlot of an ended lease = %v, %v; want false", ok, err)
		}
		if ok, err := slots.RenewSlot(ctx, key, spec, "crashed2"); err != nil || !ok {
			t.Fatalf("RenewSlot of a live lease = %v, %v; want true", ok, err)
		}
		// Renewed, the second lease outlives its first TTL.
		clock.Advance(500 * time.Millisecond)
		if g, err := slots.AcquireSlot(ctx, key, spec, "late"); err != nil || g.Acquired || g.RetryAfter != 500_000 {
			t.Fatalf("AcquireSlot past a renewed lease's first end = %+v, %v; want retry after 500000µs", g, err)
		}
		for _, h := range []string{"crashed2", "waiter"} {
			if err := slots.ReleaseSlot(ctx, key, spec, h); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// testSlotsReleaseIdempotent: a release twice, or after another holder
// took the slot, gives back nothing but its own.
func (ts *suite) testSlotsReleaseIdempotent(t *testing.T) {
	ts.forEachSlots(t, func(t *testing.T, _ *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		sem := newSemaphore(t, store, ratekeeper.Concurrency{Limit: 1, TTL: time.Minute, Name: "drivertest"})
		key := "release-" + randomHex()
		releaseA, err := sem.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		releaseA()
		releaseA()
		releaseB, err := sem.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("TryAcquire after a release: %v", err)
		}
		releaseA()
		if _, err := sem.TryAcquire(ctx, key); !errors.Is(err, ratekeeper.ErrNoSlots) {
			t.Fatalf("TryAcquire while B holds, after A released thrice: %v, want ErrNoSlots", err)
		}
		if err := store.(driver.Slots).ReleaseSlot(ctx, key, driver.SlotSpec{Name: "drivertest", Limit: 1, TTL: 60_000_000}, "nobody"); err != nil {
			t.Fatalf("ReleaseSlot of a holder without a slot: %v", err)
		}
		if _, err := sem.TryAcquire(ctx, key); !errors.Is(err, ratekeeper.ErrNoSlots) {
			t.Fatalf("TryAcquire after another holder's release: %v, want ErrNoSlots", err)
		}
		releaseB()
		if _, err := sem.TryAcquire(ctx, key); err != nil {
			t.Fatalf("TryAcquire after B released: %v", err)
		}
	})
}

// testSlotsInput: every Slots call checks its input.
func (ts *suite) testSlotsInput(t *testing.T) {
	ts.forEachSlots(t, func(t *testing.T, _ *testutil.Clock, store ratekeeper.Store) {
		ctx := context.Background()
		slots := store.(driver.Slots)
		good := driver.SlotSpec{Name: "drivertest", Limit: 1, TTL: 1_000_000}
		for _, c := range []struct {
			key, holder string
			spec        driver.SlotSpec
		}{
			{"", "h", good},
			{strings.Repeat("k", driver.MaxKeyLen+1), "h", good},
			{"k", "", good},
			{"k", strings.Repeat("h", driver.MaxHolderLen+1), good},
			{"k", "h", driver.SlotSpec{Name: "drivertest", Limit: 0, TTL: 1_000_000}},
			{"k", "h", driver.SlotSpec{Name: "drivertest", Limit: driver.MaxSlots + 1, TTL: 1_000_000}},
			{"k", "h", driver.SlotSpec{Name: "drivertest", Limit: 1, TTL: 0}},
			{"k", "h", driver.SlotSpec{Name: "", Limit: 1, TTL: 1_000_000}},
		} {
			if _, err := slots.AcquireSlot(ctx, c.key, c.spec, c.holder); err == nil {
				t.Errorf("AcquireSlot(%.10q, %+v, %.10q) took a slot", c.key, c.spec, c.holder)
			}
			if _, err := slots.RenewSlot(ctx, c.key, c.spec, c.holder); err == nil {
				t.Errorf("RenewSlot(%.10q, %+v, %.10q): no error", c.key, c.spec, c.holder)
			}
			if err := slots.ReleaseSlot(ctx, c.key, c.spec, c.holder); err == nil {
				t.Errorf("ReleaseSlot(%.10q, %+v, %.10q): no error", c.key, c.spec, c.holder)
			}
		}
	})
}

// testSlotsKilledHolder: a child process takes a slot and holds it past
// its TTL (renewed in the background), then is killed; another child
// sees the slot held until the lease ends, and takes it within a TTL of
// the kill. It skips a store whose children do not share their state.
func (ts *suite) testSlotsKilledHolder(t *testing.T) {
	switch os.Getenv(slotRoleEnv) {
	case "hold":
		ts.holdSlotUntilKilled(t)
		return
	case "watch":
		ts.watchSlot(t)
		return
	}
	if _, ok := ts.open(t, time.Now).(driver.Slots); !ok {
		t.Skip("the store is no driver.Slots: it holds no in-flight slots")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var run []string
	for _, name := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(name)+"$")
	}
	shared := randomHex()
	child := func(role string) (*exec.Cmd, *bufio.Scanner, *bufio.Writer) {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+strings.Join(run, "/"), "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), SharedEnv+"="+shared, slotRoleEnv+"="+role)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd, bufio.NewScanner(out), bufio.NewWriter(in)
	}
	// expect reads the child's lines until one that begins with
	// "drivertest: ", and returns the rest of it.
	expect := func(role string, lines *bufio.Scanner) string {
		var seen []string
		for lines.Scan() {
			if msg, ok := strings.CutPrefix(lines.Text(), "drivertest: "); ok {
				return msg
			}
			seen = append(seen, lines.Text())
		}
		t.Fatalf("the %s child ended without a word:\n%s", role, strings.Join(seen, "\n"))
		return ""
	}

	holder, holderOut, _ := child("hold")
	if msg := expect("hold", holderOut); msg != "held" {
		t.Fatalf("the holder says %q", msg)
	}
	_, watchOut, watchIn := child("watch")
	switch msg := expect("watch", watchOut); msg {
	case "not shared":
		t.Skip("the store's state is not shared between processes")
	case "seen held":
	default:
		t.Fatalf("the watcher says %q", msg)
	}
	// Past the TTL: only renewals keep the slot.
	time.Sleep(slotKilledTTL * 3 / 2)
	watchIn.WriteString("again\n")
	watchIn.Flush()
	if msg := expect("watch", watchOut); msg != "seen held" {
		t.Fatalf("past the TTL, the watcher says %q: the holder's slot was not renewed", msg)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	holder.Wait()
	watchIn.WriteString("killed\n")
	watchIn.Flush()
	msg := expect("watch", watchOut)
	var heldAfterKill bool
	var micros int64
	if _, err := fmt.Sscanf(msg, "acquired after %dµs held after kill %t", &micros, &heldAfterKill); err != nil {
		t.Fatalf("the watcher says %q: %v", msg, err)
	}
	took := time.Duration(micros) * time.Microsecond
	t.Logf("the slot came back %v after its holder was killed (TTL %v)", took, slotKilledTTL)
	if !heldAfterKill {
		t.Errorf("the slot was free as soon as its holder was killed, before its lease ended")
	}
	if took > slotKilledTTL+time.Second {
		t.Errorf("the slot came back %v after its holder was killed, more than the TTL %v (and a second)", took, slotKilledTTL)
	}
}

// holdSlotUntilKilled is the holding child of testSlotsKilledHolder.
func (ts *suite) holdSlotUntilKilled(t *testing.T) {
	store := ts.open(t, time.Now)
	sem := newSemaphore(t, store, ratekeeper.Concurrency{Limit: 1, TTL: slotKilledTTL, Name: "drivertest"})
	release, err := sem.TryAcquire(context.Background(), "killed")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	fmt.Println("drivertest: held")
	time.Sleep(20 * time.Second)
	t.Error("the holder was not killed")
}

// watchSlot is the watching child of testSlotsKilledHolder.
func (ts *suite) watchSlot(t *testing.T) {
	store := ts.open(t, time.Now)
	sem := newSemaphore(t, store, ratekeeper.Concurrency{Limit: 1, TTL: slotKilledTTL, Name: "drivertest"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := sem.TryAcquire(ctx, "killed")
	if err == nil {
		release()
		fmt.Println("drivertest: not shared")
		return
	}
	if !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Fatal(err)
	}
	fmt.Println("drivertest: seen held")
	stdin := bufio.NewReader(os.Stdin)
	if _, err := stdin.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if release, err := sem.TryAcquire(ctx, "killed"); err == nil {
		release()
		fmt.Println("drivertest: free")
		return
	}
	fmt.Println("drivertest: seen held")
	if _, err := stdin.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = sem.TryAcquire(ctx, "killed")
	heldAfterKill := errors.Is(err, ratekeeper.ErrNoSlots)
	if err == nil {
		fmt.Printf("drivertest: acquired after %dµs held after kill false\n", time.Since(start).Microseconds())
		return
	}
	release, err = sem.Acquire(ctx, "killed")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	fmt.Printf("drivertest: acquired after %dµs held after kill %t\n", time.Since(start).Microseconds(), heldAfterKill)
}

// randomHex is 48 random bits, for keys unique to a run.
func randomHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

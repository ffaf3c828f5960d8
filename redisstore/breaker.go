package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnreachable matches the error of a call that the store failed at
// once, without trying Redis, because Redis refused or dropped its last
// connections, or its host did not answer a dial. The error wraps the
// cause too. A call that fails so is a store failure like any other: it
// matches no input error, and httplimit applies its failure mode.
var ErrUnreachable = errors.New("redisstore: Redis is unreachable")

const (
	// probeEvery is the least time between two probes: while Redis is
	// unreachable, decisions resume at most this long after it answers
	// again (given a decision to start the probe).
	probeEvery = 50 * time.Millisecond
	// probeTimeout bounds one probe: a dial that takes longer, as to a
	// host that is gone, counts as a refusal.
	probeTimeout = 250 * time.Millisecond
)

// breaker fails calls at once while Redis is unreachable, instead of
// letting each wait for its whole deadline, or for go-redis's dial retries.
// It decides by a probe of its own, started by a call that failed in a way
// that may mean Redis is gone (never by an error that Redis sent, such as
// OOM or WRONGTYPE), and by calls made while it is open: at most one probe
// at a time, and one per probeEvery. The probe dials Redis with the
// client's dialer, once, and sends PING: it opens the breaker if the dial
// fails or the connection is dropped, and closes it once Redis answers,
// whatever the answer. A Redis that accepts connections but does not
// answer (paused, overloaded) leaves it closed: calls then end at their
// deadlines, as they did. Nothing runs while nobody calls.
//
// The probe does not go through the client: go-redis would retry a failed
// dial for longer than the probe may take, and count each failure towards
// its own pause of a second between dials.
type breaker struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	network string
	addr    string
	down    atomic.Pointer[unreachableError] // nil while Redis is reachable
	probing atomic.Bool
	last    atomic.Int64 // when the last probe started, in Unix nanoseconds
}

// newBreaker returns a breaker for a client of one server: a standalone
// Redis, or Sentinel's primary, which the client's dialer looks up. It is
// nil for a cluster client, whose nodes fail one by one: one node down
// must not fail the keys of the others.
func newBreaker(client redis.UniversalClient) *breaker {
	c, ok := client.(*redis.Client)
	if !ok || c.Options().Dialer == nil {
		return nil
	}
	opt := c.Options()
	return &breaker{dial: opt.Dialer, network: opt.Network, addr: opt.Addr}
}

// check returns an error matching ErrUnreachable while the breaker is
// open, and starts a probe; else nil.
func (b *breaker) check() error {
	if b == nil {
		return nil
	}
	down := b.down.Load()
	if down == nil {
		return nil
	}
	b.probe()
	return down
}

// failed is told of a call's error, and starts a probe unless the error
// says nothing of Redis's reach: a reply from Redis, or a caller that gave
// up.
func (b *breaker) failed(err error) {
	var reply redis.Error
	if b == nil || errors.As(err, &reply) || errors.Is(err, context.Canceled) {
		return
	}
	b.probe()
}

// reachable closes the breaker: Redis answered a call made outside it
// (the readiness probe).
func (b *breaker) reachable() {
	if b != nil {
		b.down.Store(nil)
	}
}

// probe PINGs Redis in the background, unless a probe is running or one
// started less than probeEvery ago, and opens or closes the breaker by its
// outcome.
func (b *breaker) probe() {
	now := time.Now().UnixNano()
	last := b.last.Load()
	if now-last < int64(probeEvery) || !b.last.CompareAndSwap(last, now) || !b.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer b.probing.Store(false)
		err := b.ping()
		if unreachable(err) {
			b.down.Store(&unreachableError{err})
		} else {
			b.down.Store(nil)
		}
	}()
}

// ping dials Redis and sends PING, within probeTimeout. Any reply will do:
// an error such as NOAUTH or LOADING comes from a Redis that is there.
func (b *breaker) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	conn, err := b.dial(ctx, b.network, b.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return err
	}
	var reply [1]byte
	_, err = io.ReadFull(conn, reply[:])
	return err
}

// unreachable reports whether err says that Redis could not be reached: a
// failed dial (refused, timed out, no route, no such host), or a
// connection closed or reset by the other end. A reply from Redis, or a
// timeout on a connection that was made, is not.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// unreachableError is the error of a call failed at once: ErrUnreachable,
// with the probe's error as its cause.
type unreachableError struct{ cause error }

func (e *unreachableError) Error() string {
	return "Redis is unreachable, failing at once until it answers again: " + e.cause.Error()
}

func (e *unreachableError) Is(target error) bool { return target == ErrUnreachable }

func (e *unreachableError) Unwrap() error { return e.cause }

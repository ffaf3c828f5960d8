package quota

import (
	"context"
	"sync"
	"time"
)

// Memory keeps quota buckets' states in this process, for a single
// replica: the model itself, on the process's clock. A bucket's state is
// dropped once it is as a new one would be, as its Redis key expires.
type Memory struct {
	// Now is the time of each step; nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*memoryBucket
	steps   int
}

type memoryBucket struct {
	state   State
	expires int64 // when it is as a new bucket
}

// sweepEvery is how many steps pass between sweeps of expired buckets:
// the work of a sweep, spread over as many steps.
const sweepEvery = 1024

// Step makes req's step on the bucket at key under r.
func (m *Memory) Step(_ context.Context, key string, r Rule, req Request) (Grant, error) {
	if err := r.Check(); err != nil {
		return Grant{}, err
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	t := now().UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buckets == nil {
		m.buckets = map[string]*memoryBucket{}
	}
	if m.steps++; m.steps%sweepEvery == 0 && len(m.buckets) >= sweepEvery {
		for k, b := range m.buckets {
			if b.expires <= t {
				delete(m.buckets, k)
			}
		}
	}
	b := m.buckets[key]
	if b == nil || b.expires <= t {
		b = &memoryBucket{}
		m.buckets[key] = b
	}
	g := b.state.Step(r, req, t)
	b.expires = b.state.expires(r, t)
	return g, nil
}

// StepAll makes steps, in order, and returns their grants.
func (m *Memory) StepAll(ctx context.Context, steps []Step) ([]Grant, error) {
	grants := make([]Grant, len(steps))
	for i, st := range steps {
		g, err := m.Step(ctx, st.Key, st.Rule, st.Request)
		if err != nil {
			return nil, err
		}
		grants[i] = g
	}
	return grants, nil
}

// Len is the number of buckets kept.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}

package quota

import (
	"context"
	"sync"
	"time"
)

// Memory keeps quota buckets' states in this process, for a single
// replica: the model itself, on the process's clock.
type Memory struct {
	// Now is the time of each step; nil is time.Now.
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*State
}

// Step makes req's step on the bucket at key under r.
func (m *Memory) Step(_ context.Context, key string, r Rule, req Request) (Grant, error) {
	if err := r.Check(); err != nil {
		return Grant{}, err
	}
	now := time.Now
	if m.Now != nil {
		now = m.Now
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buckets == nil {
		m.buckets = map[string]*State{}
	}
	s := m.buckets[key]
	if s == nil {
		s = &State{}
		m.buckets[key] = s
	}
	return s.Step(r, req, now().UnixMilli()), nil
}

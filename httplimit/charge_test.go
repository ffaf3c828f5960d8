package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestCharge: a handler charges its request's key a cost it learnt while
// serving; the key goes into debt, and its next request is denied.
func TestCharge(t *testing.T) {
	lim, _ := memLimiter(t, slow(10))
	var charged []float64
	h := Middleware(lim)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := Charge(r, 25) // say, the tokens of a completion
		if err != nil {
			t.Error(err)
		}
		charged = append(charged, res.Remaining)
	}))
	if w := serveAt(h, "/"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	if len(charged) != 1 || charged[0] != 10-1-25 {
		t.Fatalf("remaining after the charge: %v, want -16", charged)
	}
	if w := serveAt(h, "/"); w.Code != http.StatusTooManyRequests {
		t.Errorf("a request of a key in debt: %d", w.Code)
	}
	if _, err := Charge(httptest.NewRequest("GET", "/", nil), 1); !errors.Is(err, ErrNoDecision) {
		t.Errorf("Charge of an undecided request: %v", err)
	}
	if _, err := Refund(httptest.NewRequest("GET", "/", nil), 1); !errors.Is(err, ErrNoDecision) {
		t.Errorf("Refund of an undecided request: %v", err)
	}
}

// TestRefundOn: requests answered with a status the option names give
// their cost back, so failures do not count; others keep theirs.
func TestRefundOn(t *testing.T) {
	lim, _ := memLimiter(t, slow(2))
	status := http.StatusInternalServerError
	h := Middleware(lim, WithRefundOn(func(code int) bool { return code >= 500 }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			http.NewResponseController(w).Flush() // the recorder lets it through
		}))
	for i := range 5 {
		if w := serveAt(h, "/"); w.Code != http.StatusInternalServerError {
			t.Fatalf("failed request %d: %d, want its 500 (refunded, never limited)", i+1, w.Code)
		}
	}
	status = http.StatusOK
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if w := serveAt(h, "/"); w.Code != want {
			t.Errorf("request %d that succeeds: %d, want %d", i+1, w.Code, want)
		}
	}
}

// TestRefundPartial: a handler that reserved a cost up front gives back
// what it did not use.
func TestRefundPartial(t *testing.T) {
	lim, _ := memLimiter(t, slow(10))
	h := Middleware(lim, WithCostFunc(func(*http.Request) (int64, error) { return 8, nil }))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			res, err := Refund(r, 5) // used 3 of the 8 reserved
			if err != nil || res.Remaining != 7 {
				t.Errorf("after the refund: %v, %v; want 7 left", res.Remaining, err)
			}
		}))
	serveAt(h, "/")
}

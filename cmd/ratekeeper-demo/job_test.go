package main

import (
	"net/http"
	"testing"
)

// TestJob: a job is admitted like a request, then charged its cost when
// done, into debt; while in debt the key's requests and jobs are denied,
// and time repays the debt.
func TestJob(t *testing.T) {
	jobTime = 0
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		do(t, s, "POST", "/reset", "", "")
		// The default policy: a token bucket of 10, 1 a second.
		w := do(t, s, "POST", "/job", "application/x-www-form-urlencoded", "cost=15")
		if w.Code != http.StatusOK {
			t.Fatalf("a job: %d %s", w.Code, w.Body.String())
		}
		job := decode[jobReply](t, w)
		// 10 − 1 to be admitted − 15 charged, give or take a refill.
		if job.Charged != 15 || job.Remaining > -5 || job.Remaining < -6.5 || job.Allowed {
			t.Errorf("after a job of 15 on 10: %+v, want about -6 left, not fitted", job)
		}
		if job.RetryAfterMs < 5000 {
			t.Errorf("a debt of about 6 at 1 a second repaid in %v ms", job.RetryAfterMs)
		}
		if w := do(t, s, "POST", "/test", "", ""); w.Code != http.StatusTooManyRequests {
			t.Errorf("a request in debt: %d", w.Code)
		}
		if w := do(t, s, "POST", "/job", "application/x-www-form-urlencoded", "cost=1"); w.Code != http.StatusTooManyRequests {
			t.Errorf("a job in debt: %d", w.Code)
		}
		if st := getState(t, s); st.Decision == nil || st.Remaining >= 0 {
			t.Errorf("state in debt: %+v", st.Decision)
		}
		for _, body := range []string{"", "cost=0", "cost=-3", "cost=1.5", "cost=1000001"} {
			w := do(t, s, "POST", "/job", "application/x-www-form-urlencoded", body)
			if w.Code != http.StatusBadRequest {
				t.Errorf("job %q: %d", body, w.Code)
			}
			if e := decode[errorReply](t, w); e.Field != "cost" {
				t.Errorf("job %q: field %q", body, e.Field)
			}
		}
	})
}

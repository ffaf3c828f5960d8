package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ratekeeper/ratekeeper/httplimit"
)

// jobTime is how long a job of POST /job works before it reports its
// cost: long enough to see the job admitted before it is charged.
var jobTime = 600 * time.Millisecond

// maxJobCost bounds a job's cost: a few times any policy's limit is
// enough to show a debt, and a debt past a policy's bound is capped.
const maxJobCost = 1_000_000

// jobReply is the body of POST /job: the decision after the job's cost
// was charged, and that cost.
type jobReply struct {
	Decision
	Charged int64  `json:"charged"`
	Capped  bool   `json:"capped,omitempty"`
	Config  config `json:"config"`
}

type jobCostKey struct{}

// handleJob runs a job whose cost is known only when it is done, as an
// LLM call's tokens are: it is admitted like a request of cost 1, works,
// then charges its cost, which may drive the key into debt (a Remaining
// below zero) that time repays; while in debt, the key's requests are
// denied.
func (s *server) handleJob(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "malformed form: "+err.Error())
		return
	}
	cost, err := strconv.ParseInt(r.Form.Get("cost"), 10, 64)
	if err != nil || cost < 1 || cost > maxJobCost {
		writeJSON(w, http.StatusBadRequest, errorReply{Field: "cost",
			Error: fmt.Sprintf("cost must be a whole number from 1 to %d.", maxJobCost)})
		return
	}
	s.current.Load().job.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), jobCostKey{}, cost)))
}

// jobHandler is the job behind the limiter's middleware.
func (s *server) jobHandler(cfg config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cost, _ := r.Context().Value(jobCostKey{}).(int64)
		select {
		case <-time.After(jobTime):
		case <-r.Context().Done():
			// The client has gone, but the work was done: it is charged.
		}
		res, err := httplimit.Charge(r, cost)
		if err != nil {
			s.storeFailed(w, "charge", err)
			return
		}
		writeJSON(w, http.StatusOK, jobReply{Decision: newDecision(res), Charged: cost, Capped: res.Capped, Config: cfg})
	})
}

package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestLeasesToggle: with leases on, the demo's limiter decides its hot
// key in process, and the page's state shows far fewer store calls than
// decisions; with them off, one call per decision. A policy that takes no
// leases refuses the toggle, naming the field.
func TestLeasesToggle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be *backend) {
		s := newTestServer(t, be)
		decide := func(n int) {
			for range n {
				if w := do(t, s, http.MethodPost, "/test", "", ""); w.Code != http.StatusOK && w.Code != http.StatusTooManyRequests {
					t.Fatalf("POST /test: %d %s", w.Code, w.Body)
				}
			}
		}
		postConfig(t, s, "application/json", `{"algorithm":"fixed_window","limit":1000,"window":60}`)
		decide(200)
		off := getState(t, s)
		if off.Decisions != 200 || off.StoreCalls != 200 {
			t.Fatalf("without leases: %d decisions, %d store calls; want 200 and 200", off.Decisions, off.StoreCalls)
		}
		reply := postConfig(t, s, "application/json", `{"leases":true}`)
		if !reply.Config.Leases {
			t.Fatalf("POST /config leases: %+v", reply.Config)
		}
		decide(200)
		on := getState(t, s)
		if on.Decisions != 200 || on.StoreCalls < 1 || on.StoreCalls > 40 || !on.Config.Leases {
			t.Fatalf("with leases: %d decisions, %d store calls, %+v; want 200, and far fewer calls", on.Decisions, on.StoreCalls, on.Config)
		}
		// The form's way of turning them off.
		if reply := postConfig(t, s, "application/x-www-form-urlencoded", "leases=false"); reply.Config.Leases {
			t.Fatalf("leases=false: %+v", reply.Config)
		}
		w := do(t, s, http.MethodPost, "/config", "application/json", `{"algorithm":"sliding_window_log","leases":true}`)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"field":"leases"`) || !strings.Contains(w.Body.String(), "takes no leases") {
			t.Fatalf("leases on a sliding window log: %d %s", w.Code, w.Body)
		}
	})
}

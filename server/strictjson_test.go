package server

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestDecideDeepNesting: a body of a mebibyte of '[' is a 400 that
// names the nesting, in constant memory. The memory is measured on the
// goroutine that serves the request, with the collector off so that
// nothing is given back before it is read: what the heap allocated, and
// how far the goroutine's stack grew (a check that recursed once per
// level grew it by hundreds of MiB).
func TestDecideDeepNesting(t *testing.T) {
	svc := newService(t, memstore.New(), testConfig, Options{})
	h := HTTPHandler(svc, nil, nil)
	deep := strings.Repeat("[", maxBody)
	serve := func(body string) (*httptest.ResponseRecorder, uint64) {
		var rec *httptest.ResponseRecorder
		var used uint64
		done := make(chan struct{})
		go func() {
			defer close(done)
			req := httptest.NewRequest(http.MethodPost, "/v1/decide", strings.NewReader(body))
			rec = httptest.NewRecorder()
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			h.ServeHTTP(rec, req)
			runtime.ReadMemStats(&after)
			used = after.TotalAlloc - before.TotalAlloc
			if after.StackInuse > before.StackInuse {
				used += after.StackInuse - before.StackInuse
			}
		}()
		<-done
		return rec, used
	}
	// The measure is not vacuous: a flat body of the same size, read
	// and decoded whole, shows at least its own size.
	flat, flatUsed := serve(strings.Repeat(" ", maxBody-2) + "{}")
	if flat.Code != http.StatusBadRequest || flatUsed < maxBody {
		t.Fatalf("a flat body: %d %q, %d bytes", flat.Code, flat.Body.String(), flatUsed)
	}
	rec, used := serve(deep)
	t.Logf("a body of %d '[': %d, %.1f MiB (a flat one: %.1f MiB)", maxBody, rec.Code, float64(used)/(1<<20), float64(flatUsed)/(1<<20))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "64 levels") {
		t.Errorf("a body of %d '[': %d %q, want 400 naming the depth", maxBody, rec.Code, rec.Body.String())
	}
	const bound = 8 << 20
	if used > bound {
		t.Errorf("a body of %d '[' cost %.1f MiB, want at most %d MiB", maxBody, float64(used)/(1<<20), bound>>20)
	}
	// Within the bound, nesting is no error: 64 levels of arrays in a
	// field /v1/decide does not know are refused as unknown, not as deep.
	ok := `{"domain":"test","x":` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + `}`
	if rec, _ := serve(ok); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "unknown field") {
		t.Errorf("%d levels: %d %q, want 400 for the unknown field", maxJSONDepth, rec.Code, rec.Body.String())
	}
}

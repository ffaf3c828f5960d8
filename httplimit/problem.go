package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

func (m *middleware) tooManyRequests(w http.ResponseWriter, r *http.Request) {
	res, _ := ResultFromContext(r.Context())
	violated := []string{res.Policy}
	if res.Parts != nil {
		violated = violated[:0]
		for _, p := range res.Parts {
			if !p.Allowed {
				violated = append(violated, p.Policy)
			}
		}
	}
	writeProblem(w, problem{
		Type:     "https://iana.org/assignments/http-problem-types#quota-exceeded",
		Title:    "Request cannot be satisfied as assigned quota has been exceeded",
		Status:   http.StatusTooManyRequests,
		Detail:   "The " + strconv.Quote(res.Policy) + " rate limit is exhausted; retry after " + w.Header().Get("Retry-After") + " s.",
		Violated: violated,
	})
}

func badRequest(w http.ResponseWriter, _ *http.Request, err error) {
	writeProblem(w, problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusBadRequest),
		Status: http.StatusBadRequest,
		Detail: err.Error(),
	})
}

func failOpen(w http.ResponseWriter, r *http.Request, next http.Handler, _ error) {
	next.ServeHTTP(w, r)
}

// failClosed keeps the cause out of the body: it describes the
// infrastructure, not the request.
func failClosed(w http.ResponseWriter, _ *http.Request, _ http.Handler, _ error) {
	writeProblem(w, problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable,
		Detail: "The rate limiter is unavailable.",
	})
}

// problem is an RFC 9457 problem details object.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

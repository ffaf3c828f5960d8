package envoydiff

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratekeeper/ratekeeper/server/internal/envoytest"
)

// service is one running rate limit service, as a test calls it.
type service struct {
	name  string
	addrs envoytest.Addrs
	rls   rlsv3.RateLimitServiceClient
}

func dial(t *testing.T, name string, addrs envoytest.Addrs) *service {
	t.Helper()
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &service{name: name, addrs: addrs, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

// pair is envoyproxy/ratelimit and ratekeeper-server on one Redis and one
// configuration. rk is nil while ratekeeper-server is not written yet:
// the test then checks envoy's half alone and skips at its end (see
// finish).
type pair struct {
	envoy, rk *service
}

// startPair starts both services with the configuration of each domain
// (one file per domain); envoyEnv adds to envoy's settings.
func startPair(t *testing.T, domains map[string][]*rule, envoyEnv ...string) *pair {
	t.Helper()
	addr := envoytest.RedisAddr(t)
	files := configFiles(domains)
	p := &pair{envoy: dial(t, "envoy", envoytest.StartEnvoy(t, addr, files, envoyEnv...))}
	if envoytest.HasRatekeeper(t) {
		p.rk = dial(t, "ratekeeper", envoytest.StartRatekeeper(t, "redis://"+addr+"/0", files))
	}
	return p
}

// configFiles are the configuration files of domains, one per domain.
func configFiles(domains map[string][]*rule) map[string]string {
	files := map[string]string{}
	for name, rules := range domains {
		files[name+".yaml"] = yamlConfig(name, rules)
	}
	return files
}

// services returns the pair's running services, envoy's first.
func (p *pair) services() []*service {
	if p.rk == nil {
		return []*service{p.envoy}
	}
	return []*service{p.envoy, p.rk}
}

// finish skips t, once envoy's half has passed, while ratekeeper-server
// is not written yet.
func (p *pair) finish(t *testing.T) {
	t.Helper()
	if p.rk == nil && !t.Failed() {
		t.Skip("envoy's half passed; ratekeeper-server's is skipped, server/cmd/ratekeeper-server does not exist yet")
	}
}

// domainName returns a domain name unique to this run, so that counters
// left in Redis by an earlier run never count.
func domainName(tag string) string {
	var b [4]byte
	rand.Read(b[:])
	return tag + "-" + hex.EncodeToString(b[:])
}

// call is one answer, with the clock around it.
type call struct {
	resp           *rlsv3.RateLimitResponse
	err            error
	before, after  time.Time
	httpStatus     int // 0 over gRPC
	transportIssue string
}

// ask sends req to s over gRPC, or as POST /json when overHTTP.
func (s *service) ask(req *rlsv3.RateLimitRequest, overHTTP bool) call {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := call{before: time.Now()}
	if overHTTP {
		c.resp, c.httpStatus, c.err = s.postJSON(ctx, req)
		if c.err == nil {
			want := http.StatusOK
			if c.resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				want = http.StatusTooManyRequests
			}
			if c.httpStatus != want {
				c.transportIssue = fmt.Sprintf("HTTP %d for overall_code %v, want %d", c.httpStatus, c.resp.GetOverallCode(), want)
			}
		}
	} else {
		c.resp, c.err = s.rls.ShouldRateLimit(ctx, req)
	}
	c.after = time.Now()
	return c
}

// postJSON posts req as proto JSON to /json and decodes the answer.
func (s *service) postJSON(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, int, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	status, out, err := s.post(ctx, "/json", body)
	if err != nil {
		return nil, 0, err
	}
	if status != http.StatusOK && status != http.StatusTooManyRequests {
		return nil, status, fmt.Errorf("POST /json: HTTP %d: %s", status, bytes.TrimSpace(out))
	}
	resp := &rlsv3.RateLimitResponse{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(out, resp); err != nil {
		return nil, status, fmt.Errorf("POST /json: HTTP %d, body %q: %w", status, out, err)
	}
	return resp, status, nil
}

// post sends body to path and returns the status and body of the answer.
func (s *service) post(ctx context.Context, path string, body []byte) (int, []byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.addrs.URL(path), bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return 0, nil, err
	}
	defer hresp.Body.Close()
	out, err := io.ReadAll(hresp.Body)
	return hresp.StatusCode, out, err
}

// compare returns how got differs from want, field by field, or "" when
// it does not. Durations until reset may differ by tol seconds; a want
// duration of resetMarker means the time to the end of the status's
// window, as the clock read around the call c says, ±1 s.
func compare(got, want *rlsv3.RateLimitResponse, c call, tol float64) string {
	var diffs []string
	if got.GetOverallCode() != want.GetOverallCode() {
		diffs = append(diffs, fmt.Sprintf("overall_code %v, want %v", got.GetOverallCode(), want.GetOverallCode()))
	}
	if len(got.GetStatuses()) != len(want.GetStatuses()) {
		return strings.Join(append(diffs, fmt.Sprintf("%d statuses, want %d", len(got.GetStatuses()), len(want.GetStatuses()))), "; ")
	}
	for i, w := range want.GetStatuses() {
		g := got.GetStatuses()[i]
		at := fmt.Sprintf("statuses[%d].", i)
		if g.GetCode() != w.GetCode() {
			diffs = append(diffs, fmt.Sprintf("%scode %v, want %v", at, g.GetCode(), w.GetCode()))
		}
		if g.GetLimitRemaining() != w.GetLimitRemaining() {
			diffs = append(diffs, fmt.Sprintf("%slimit_remaining %d, want %d", at, g.GetLimitRemaining(), w.GetLimitRemaining()))
		}
		gl, wl := g.GetCurrentLimit(), w.GetCurrentLimit()
		switch {
		case (gl == nil) != (wl == nil):
			diffs = append(diffs, fmt.Sprintf("%scurrent_limit %s, want %s", at, limitString(gl), limitString(wl)))
		case wl != nil && (gl.GetRequestsPerUnit() != wl.GetRequestsPerUnit() || gl.GetUnit() != wl.GetUnit()):
			diffs = append(diffs, fmt.Sprintf("%scurrent_limit %s, want %s", at, limitString(gl), limitString(wl)))
		case wl != nil && gl.GetName() != wl.GetName():
			diffs = append(diffs, fmt.Sprintf("%scurrent_limit.name %q, want %q", at, gl.GetName(), wl.GetName()))
		}
		if d := compareReset(g, w, c, tol); d != "" {
			diffs = append(diffs, at+d)
		}
	}
	return strings.Join(diffs, "; ")
}

// counterless reports whether every difference compare found is in a
// field that says nothing of the counters (a limit's name, a duration),
// so that the models still know both services' counters after it.
func counterless(diff string) bool {
	for _, d := range strings.Split(diff, "; ") {
		if !strings.Contains(d, ".current_limit.name ") && !strings.Contains(d, ".duration_until_reset ") {
			return false
		}
	}
	return true
}

// compareReset checks a status's duration_until_reset.
func compareReset(g, w *rlsv3.RateLimitResponse_DescriptorStatus, c call, tol float64) string {
	gd, wd := g.GetDurationUntilReset(), w.GetDurationUntilReset()
	if wd == nil {
		if gd != nil {
			return fmt.Sprintf("duration_until_reset %v, want none", gd.AsDuration())
		}
		return ""
	}
	if gd == nil {
		return "no duration_until_reset, want one"
	}
	got := gd.AsDuration().Seconds()
	if wd != resetMarker {
		if math.Abs(got-wd.AsDuration().Seconds()) > tol {
			return fmt.Sprintf("duration_until_reset %v, want %v ±%.1fs", gd.AsDuration(), wd.AsDuration(), tol)
		}
		return ""
	}
	n := seconds(w.GetCurrentLimit().GetUnit())
	hi := float64(n - c.before.Unix()%n)
	lo := float64(n - c.after.Unix()%n)
	if got < lo-1 || got > hi+1 {
		return fmt.Sprintf("duration_until_reset %v, want %v to %v ±1s", gd.AsDuration(), lo, hi)
	}
	return ""
}

// compareReplies compares ratekeeper's answer with envoy's directly,
// field by field, the durations within 1 s plus the time between the
// two calls.
func compareReplies(envoy, rk call) string {
	return compare(rk.resp, envoy.resp, rk, rk.after.Sub(envoy.before).Seconds()+1)
}

func limitString(l *rlsv3.RateLimitResponse_RateLimit) string {
	if l == nil {
		return "none"
	}
	s := fmt.Sprintf("%d/%v", l.GetRequestsPerUnit(), l.GetUnit())
	if l.GetName() != "" {
		s += fmt.Sprintf(" %q", l.GetName())
	}
	return s
}

// responseString spells an answer compactly, for failure messages.
func responseString(r *rlsv3.RateLimitResponse) string {
	if r == nil {
		return "<nil>"
	}
	parts := make([]string, len(r.GetStatuses()))
	for i, s := range r.GetStatuses() {
		parts[i] = fmt.Sprintf("%v limit=%s remaining=%d", s.GetCode(), limitString(s.GetCurrentLimit()), s.GetLimitRemaining())
		if d := s.GetDurationUntilReset(); d == resetMarker {
			parts[i] += " reset=<window end>"
		} else if d != nil {
			parts[i] += fmt.Sprintf(" reset=%v", d.AsDuration())
		}
	}
	return fmt.Sprintf("%v [%s]", r.GetOverallCode(), strings.Join(parts, "; "))
}

// requestString spells a request as proto JSON.
func requestString(req *rlsv3.RateLimitRequest) string {
	b, err := protojson.Marshal(req)
	if err != nil {
		return req.String()
	}
	return string(b)
}

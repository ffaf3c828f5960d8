package config

import (
	"strings"
	"testing"
	"time"
)

func TestQuotaBuckets(t *testing.T) {
	cfg, errs := loadYAML(t, `domain: api
quota_buckets:
  - bucket: {name: global}
    rate_limit: {unit: second, requests_per_unit: 10000}
  - bucket: {tenant: "*"}
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, burst: 100}
`)
	if errs != nil {
		t.Fatal(errs)
	}
	q, key := cfg.QuotaBucket("api", map[string]string{"path": "/x", "name": "global"})
	if q == nil || key != "name=global" || q.RequestsPerUnit != 10000 || q.Burst != 10000 || q.Unit != time.Second {
		t.Fatalf("global: %+v %q", q, key)
	}
	q, key = cfg.QuotaBucket("api", map[string]string{"tenant": "a|b"})
	if q == nil || key != "tenant=*|3:a|b" || q.Burst != 100 || q.Unit != time.Minute {
		t.Fatalf("tenant: %+v %q", q, key)
	}
	if q, _ := cfg.QuotaBucket("api", map[string]string{"other": "x"}); q != nil {
		t.Fatalf("an id that matches nothing: %+v", q)
	}
}

func TestQuotaBucketErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"quota_buckets:\n  - rate_limit: {unit: second, requests_per_unit: 1}\n", "quota_buckets[0].bucket"},
		{"quota_buckets:\n  - bucket: {a: b}\n", "quota_buckets[0].rate_limit"},
		{"quota_buckets:\n  - bucket: {a: b}\n    rate_limit: {unit: week, requests_per_unit: 1}\n", "quota_buckets[0].rate_limit.unit"},
		{"quota_buckets:\n  - bucket: {a: b}\n    rate_limit: {unit: second}\n", "quota_buckets[0].rate_limit.requests_per_unit"},
		{"quota_buckets:\n  - bucket: {a: b}\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}\n", "quota_buckets[0].rate_limit.algorithm"},
		{"quota_buckets:\n  - bucket: {a: b}\n    rate_limit: {unit: second, requests_per_unit: 1, lease: {ttl: 1s}}\n", "quota_buckets[0].rate_limit.lease"},
	} {
		_, errs := loadYAML(t, "domain: api\n"+c.yaml)
		if len(errs) != 1 || !strings.Contains(errs[0], c.want) {
			t.Errorf("%s: %q, want one error at %s", c.yaml, errs, c.want)
		}
	}
}

package measure

import (
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1000, 12345, 1 << 40, 1<<63 - 1} {
		i := bucketOf(v)
		if i < 0 || i >= len(Histogram{}.counts) {
			t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
		}
		mid := bucketMid(i)
		if diff := float64(mid) - float64(v); diff > float64(v)/60+1 || -diff > float64(v)/60+1 {
			t.Errorf("bucketMid(bucketOf(%d)) = %d, more than 1/60 away", v, mid)
		}
	}
}

func TestHistogramQuantile(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.Quantile(c.q)
		if d := got - c.want; d > c.want/50 || -d > c.want/50 {
			t.Errorf("quantile(%v) = %v, want about %v", c.q, got, c.want)
		}
	}
}

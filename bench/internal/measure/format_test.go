package measure

import (
	"strings"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{Micros(2500 * time.Nanosecond), "2.5"},
		{Micros(1234 * time.Microsecond), "1234"},
		{Thousands(999.6), "1,000"},
		{Thousands(1234567), "1,234,567"},
		{Thousands(12), "12"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestMedianRatio(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("Median(3,1,2) = %v, want 2", m)
	}
	if m := Median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("Median(4,1,2,3) = %v, want 2.5", m)
	}
	if m := Median(nil); m != 0 {
		t.Errorf("Median() = %v, want 0", m)
	}
	// Per-round ratios 2, 4 and 3 (the fourth round has no baseline):
	// their median, not the ratio of the medians.
	r, ok := MedianRatio([]float64{20, 40, 60, 5}, []float64{10, 10, 20, 0})
	if !ok || r != 3 {
		t.Errorf("MedianRatio = %v, %v; want 3, true", r, ok)
	}
	if _, ok := MedianRatio([]float64{1}, []float64{0}); ok {
		t.Error("MedianRatio with no baseline: ok")
	}
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:6379": true, "localhost:1": true, "[::1]:80": true,
		"10.0.0.1:6379": false, "example.com:6379": false, "127.0.0.1": false,
	} {
		err := CheckLoopback("addr", addr)
		if (err == nil) != ok {
			t.Errorf("CheckLoopback(%q) = %v", addr, err)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "-addr: ") {
			t.Errorf("CheckLoopback(%q) = %q, not naming its flag", addr, err)
		}
	}
}

func TestParseInfoNumbers(t *testing.T) {
	f, err := ParseInfoNumbers("# Stats\r\ntotal_commands_processed:42\r\ntotal_reads_processed:7\r\nrdb_last_bgsave_status:ok\r\n")
	if err != nil {
		t.Fatal(err)
	}
	if f["total_commands_processed"] != 42 || f["total_reads_processed"] != 7 || len(f) != 2 {
		t.Errorf("ParseInfoNumbers = %v", f)
	}
}

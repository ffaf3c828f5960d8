package logpace_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/server/internal/logpace"
)

func TestPacer(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	var p logpace.Pacer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{0, 0, 500 * time.Millisecond, 499 * time.Millisecond, time.Millisecond, 2 * time.Second} {
		now = now.Add(d)
		p.Log(logger, slog.LevelWarn, now, "failed", "err", "x")
	}
	var got []float64
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var rec map[string]any
		if err := dec.Decode(&rec); err != nil {
			t.Fatal(err)
		}
		if rec["level"] != "WARN" || rec["err"] != "x" {
			t.Errorf("record %v", rec)
		}
		got = append(got, rec[logpace.NotLogged].(float64))
	}
	// Lines at 0 s, 1 s (three left out before it) and 3 s.
	if want := []float64{0, 3, 0}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("%s counts %v, want %v", logpace.NotLogged, got, want)
	}
}

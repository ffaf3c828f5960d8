package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteChart(t *testing.T) {
	cfg := config{conc: []int{1, 16, 128}, libs: libs, modes: []string{"allow", "hot"}, rounds: 3,
		dur: 5 * time.Second, policy: policy{Rate: 100, Period: time.Second, Burst: 100}, deadlines: []time.Duration{time.Second}}
	med := make(map[cell]sample)
	for _, mode := range cfg.modes {
		for i, conc := range cfg.conc {
			for j, l := range cfg.libs {
				rate := float64(1000 * (i + 1) * (j + 1))
				if mode == "hot" && l.name == "ratekeeper+denycache" {
					rate = 2e6 // far above the rest: its bars are clipped
				}
				med[cell{mode, conc, time.Second, l.name}] = sample{rate: rate}
			}
		}
	}
	path := filepath.Join(t.TempDir(), "chart.svg")
	if out := os.Getenv("LOADGEN_CHART"); out != "" {
		path = out // to look at it
	}
	if err := writeChart(path, cfg, med, "7.0.15"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(string(data)))
	for {
		if _, err := dec.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"ratekeeper", "redis_rate", "128 goroutines", "2.0M"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

func TestChartScale(t *testing.T) {
	if top, clip := chartScale([]float64{10, 20, 30}); clip || top != 50 {
		t.Errorf("chartScale(10, 20, 30) = %v, %v; want 50, false", top, clip)
	}
	if top, clip := chartScale([]float64{10, 20, 1000}); !clip || top != 25 {
		t.Errorf("chartScale(10, 20, 1000) = %v, %v; want 25, true", top, clip)
	}
}

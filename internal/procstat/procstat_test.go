package procstat

import (
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	line := "1234 (a b) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 8 0 100 1000000 2000 18446744073709551615\n"
	us, err := parse(line)
	if err != nil || us != 3e6 {
		t.Errorf("parse = %v, %v; want 3e6 µs (300 ticks)", us, err)
	}
	if _, err := parse("1234 (x) S 1"); err == nil {
		t.Error("a short line: no error")
	}
	if us, err := CPU(os.Getpid()); err != nil || us < 0 {
		t.Errorf("CPU(self) = %v, %v", us, err)
	}
}

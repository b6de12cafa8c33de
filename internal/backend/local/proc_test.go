package local

import (
	"os"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	line := "42 (a) b (c)) S 7 42 9 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10 18446744073709551615\n"
	p, err := parseProcStat(42, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procStat{pid: 42, state: 'S', ppid: 7, pgrp: 42, session: 9, start: 123456}); p != want {
		t.Errorf("parseProcStat = %+v, want %+v", p, want)
	}
	if _, err := parseProcStat(1, []byte("1 (x) S 0 1")); err == nil {
		t.Error("a short line parsed")
	}
	self, err := readProcStat(os.Getpid())
	if err != nil || self.ppid != os.Getppid() || self.start == 0 {
		t.Errorf("readProcStat(self) = %+v, %v", self, err)
	}
}

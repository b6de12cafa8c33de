package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestRunUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"--table", "nope"}, `--table "nope": want one of digits-mlp, digits-mlp-e0`},
		{[]string{"--workers", "3"}, "--workers 3: want 1 or 2"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		var stderr bytes.Buffer
		if code := run(tc.args, &bytes.Buffer{}, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run %v = %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

func TestForEachCallsEveryIndexOnce(t *testing.T) {
	seen := make([]int, 45)
	var progress bytes.Buffer
	forEach(len(seen), 2, &progress, func(i int) { seen[i]++ }) // each i is written by one goroutine only
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("index %d done %d times, want once", i, n)
		}
	}
	if !strings.Contains(progress.String(), "45/45 configurations") {
		t.Errorf("progress lacks the last line:\n%s", progress.String())
	}
}

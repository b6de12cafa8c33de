package input_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/virga-ml/virga/elastic"
	"github.com/virga-ml/virga/elastic/input"
)

func Example() {
	in := "pixel1,pixel2,digit\n0,16,7\n3,5,1\n"
	src, err := input.NewReader(strings.NewReader(in), "digits.csv", input.Options{Header: true, Label: input.LastColumn})
	if err != nil {
		panic(err)
	}
	b, err := src.Next(context.Background())
	if err != nil {
		panic(err)
	}
	fmt.Println(b.Rows(), b.Cols, b.X, b.Y, src.Pos())
	// Output: 2 2 [0 16 3 5] [7 1] 2
}

// TestLocalShards runs the in-process runtime over 1 and 3 shards of the
// digits file: the exact moments agree.
func TestLocalShards(t *testing.T) {
	const p = "../../examples/data/digits.csv.gz"
	if _, err := os.Stat(p); err != nil {
		t.Skip(err)
	}
	run := func(n int) elastic.Model {
		var srcs []elastic.Source
		for k := range n {
			s, err := input.OpenShard(p, input.Options{Label: input.LastColumn, BatchRows: 50}, k, n)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srcs = append(srcs, s)
		}
		m, _, err := elastic.Local(context.Background(), elastic.Moments{}, srcs)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	one, three := run(1), run(3)
	if one["count"][0] != 1797 || three["count"][0] != 1797 || len(one["mean"]) != 64 {
		t.Fatalf("counts %v %v", one["count"], three["count"])
	}
	for j := range one["mean"] {
		if d := one["mean"][j] - three["mean"][j]; d > 1e-9 || d < -1e-9 {
			t.Fatalf("column %d: mean %v on 1 shard, %v on 3", j, one["mean"][j], three["mean"][j])
		}
	}
}

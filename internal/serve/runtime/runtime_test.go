package runtime

import (
	"fmt"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/serve"
)

func TestConcatAndSplit(t *testing.T) {
	a := serve.Tensor{Name: "x", Datatype: serve.Int32, Shape: []int64{1, 2}, Data: []int32{1, 2}}
	b := serve.Tensor{Name: "x", Datatype: serve.Int32, Shape: []int64{2, 2}, Data: []int32{3, 4, 5, 6}}
	c, err := Concat([]serve.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Shape, c.Data) != "[3 2] [1 2 3 4 5 6]" {
		t.Fatalf("concat: %v %v", c.Shape, c.Data)
	}
	parts, err := Split(c, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(parts[0].Shape, parts[0].Data, parts[1].Shape, parts[1].Data) != "[1 2] [1 2] [2 2] [3 4 5 6]" {
		t.Fatalf("split: %+v", parts)
	}
	if _, err := Split(c, []int{1, 1}); err == nil || !strings.Contains(err.Error(), "splitting 3 rows into parts of [1 1] rows") {
		t.Errorf("split of the wrong rows: %v", err)
	}
	d := serve.Tensor{Name: "x", Datatype: serve.Int32, Shape: []int64{1, 3}, Data: []int32{1, 2, 3}}
	if _, err := Concat([]serve.Tensor{a, d}); err == nil {
		t.Error("concatenated [1 2] with [1 3]")
	}
	for _, dt := range []serve.Datatype{serve.Bool, serve.Uint8, serve.Uint16, serve.Uint32, serve.Uint64, serve.Int8, serve.Int16, serve.Int32, serve.Int64, serve.FP16, serve.FP32, serve.FP64, serve.Bytes} {
		z, err := Zeros("z", dt, []int64{2, 3})
		if err != nil {
			t.Fatal(err)
		}
		if Len(z) != 6 || fmt.Sprintf("%T", z.Data) != strings.ReplaceAll(GoType(dt), "byte", "uint8") {
			t.Errorf("%s: zeros of %T (%d), GoType %s", dt, z.Data, Len(z), GoType(dt))
		}
		if _, err := Concat([]serve.Tensor{z, z}); err != nil {
			t.Errorf("%s: %v", dt, err)
		}
	}
}

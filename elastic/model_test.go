package elastic

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestModelRoundTrip(t *testing.T) {
	m := &SavedModel{Algorithm: "median", Params: map[string]float64{"batch": 1000},
		Tensors: map[string]SavedTensor{"median": {Shape: []int{1}, Data: []float64{130.24}}, "w": {Shape: []int{2, 3}, Data: []float64{1, 2, 3, 4, 5, 6}}},
		Meta:    map[string]string{"note": "x"}}
	p := filepath.Join(t.TempDir(), "model.json")
	if err := SaveModelFile(p, m); err != nil {
		t.Fatal(err)
	}
	got, err := LoadModelFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
	}
}

func TestModelValidate(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"format": "other", "algorithm": "a", "tensors": {}}`, "model format"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "", "tensors": {}}`, "algorithm is empty"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {"w": {"shape": [2, 2], "data": [1, 2, 3]}}}`, "holds 4 numbers"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {"w": {"shape": [-1], "data": []}}}`, "bad shape"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {}, "extra": 1}`, "unknown field"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {}} {"format": "x"}`, "data after the model"},
		{`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {}} ]`, "data after the model"},
	} {
		if _, err := ReadModel(strings.NewReader(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadModel(%s) = %v; want an error about %q", c.json, err, c.want)
		}
	}
}

// FuzzReadModel: any input is read or refused, never a panic, and what is
// read writes back to what reads the same.
func FuzzReadModel(f *testing.F) {
	f.Add([]byte(`{"format": "virga.elastic.model/v1", "algorithm": "a", "tensors": {"w": {"shape": [2], "data": [1, 2]}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadModel(bytes.NewReader(b))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteModel(&buf, m); err != nil {
			t.Fatalf("a model that was read cannot be written: %v", err)
		}
		if _, err := ReadModel(&buf); err != nil {
			t.Fatalf("a written model cannot be read: %v", err)
		}
	})
}

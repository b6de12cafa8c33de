package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
)

// TestOpenAPISchemasMatchJSON checks that the document's schemas of the
// types the API returns as they are list exactly their JSON fields, so a
// field added to one of them is documented.
func TestOpenAPISchemasMatchJSON(t *testing.T) {
	for name, v := range map[string]any{"Experiment": virga.Experiment{}, "Trial": virga.Trial{}, "Prediction": virga.Prediction{}, "Attempt": virga.Attempt{},
		"PoolSpend": PoolSpend{}} {
		schema, ok := schemas()[name].(map[string]any)
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var documented []string
		for p := range schema["properties"].(map[string]any) {
			documented = append(documented, p)
		}
		fields := jsonFields(reflect.TypeOf(v))
		slices.Sort(documented)
		slices.Sort(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("schema %s has properties\n%v\nwant the JSON fields of %T\n%v", name, documented, v, fields)
		}
	}
}

// jsonFields returns the names of a struct's JSON fields, those of embedded
// structs included.
func jsonFields(typ reflect.Type) []string {
	var fields []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct:
			fields = append(fields, jsonFields(f.Type)...)
		case tag != "" && tag != "-":
			fields = append(fields, tag)
		}
	}
	return fields
}

package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
)

// TestOpenAPISchemasMatchJSON checks that the document's schemas of the
// domain types the API returns as they are list exactly their JSON fields,
// so a field added to one of them is documented.
func TestOpenAPISchemasMatchJSON(t *testing.T) {
	for name, v := range map[string]any{"Trial": virga.Trial{}, "Prediction": virga.Prediction{}} {
		schema, ok := schemas()[name].(map[string]any)
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var documented []string
		for p := range schema["properties"].(map[string]any) {
			documented = append(documented, p)
		}
		var fields []string
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			if tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		slices.Sort(documented)
		slices.Sort(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("schema %s has properties\n%v\nwant the JSON fields of virga.%s\n%v", name, documented, name, fields)
		}
	}
}

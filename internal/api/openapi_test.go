package api

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
)

// TestOpenAPISchemasMatchJSON checks that the document's schemas of the
// types the API returns as they are list exactly their JSON fields, so a
// field added to one of them is documented.
func TestOpenAPISchemasMatchJSON(t *testing.T) {
	for name, v := range map[string]any{"Experiment": virga.Experiment{}, "Trial": virga.Trial{}, "Prediction": virga.Prediction{}, "Attempt": virga.Attempt{},
		"PoolSpend": wire.PoolSpend{}, "ModelVersion": virga.ModelVersion{}, "ModelAlias": virga.ModelAlias{}, "Model": virga.Model{},
		"ModelTensor": virga.ModelTensor{}, "ModelSignature": virga.ModelSignature{}, "ModelView": wire.ModelView{},
		"RegisterModelRequest": wire.RegisterModelRequest{}, "AliasRequest": wire.AliasRequest{}} {
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

// TestOpenAPIDocumentsReportStatuses checks that the document lists the
// statuses a report may be answered with, each with the Error schema.
func TestOpenAPIDocumentsReportStatuses(t *testing.T) {
	doc := OpenAPI("test")
	op := doc["paths"].(map[string]any)["/api/v1/attempts/{id}/report"].(map[string]any)["post"].(map[string]any)
	resp := op["responses"].(map[string]any)
	for _, code := range []string{"200", "400", "404", "409", "413", "422", "default"} {
		r, ok := resp[code].(map[string]any)
		if !ok {
			t.Errorf("report: no response %s documented", code)
			continue
		}
		if code == "200" {
			continue
		}
		content, _ := r["content"].(map[string]any)
		if js, _ := content["application/json"].(map[string]any); js == nil || !reflect.DeepEqual(js["schema"], ref("Error")) {
			t.Errorf("report: response %s does not have the Error schema: %v", code, r)
		}
	}
	if d := resp["413"].(map[string]any)["description"]; !strings.Contains(fmt.Sprint(d), fmt.Sprint(MaxBody)) {
		t.Errorf("report: 413 is described as %q, want the limit %d", d, MaxBody)
	}
}

package storetest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// newModelVersion returns a version of model name with files files, as a
// trial's checkpoint would give it.
func newModelVersion(name, files string) *virga.ModelVersion {
	return &virga.ModelVersion{
		Name: name, FilesID: files, Size: 1234, Files: 2, Format: "virga.mlp/v1",
		Signature: virga.ModelSignature{
			Inputs: []virga.ModelTensor{{Name: "pixels", Datatype: "FP32", Shape: []int64{-1, 64}}},
			Outputs: []virga.ModelTensor{{Name: "probabilities", Datatype: "FP32", Shape: []int64{-1, 10}},
				{Name: "label", Datatype: "INT64", Shape: []int64{-1}}},
		},
		ExperimentID: 3, TrialID: 7, Step: 20, CheckpointID: strings.Repeat("c", 64),
		HParams:     map[string]any{"lr": 0.1, "hidden": 64.0},
		Metrics:     map[string]float64{"val_accuracy": 0.97, "val_loss": math.Inf(1)},
		Description: "digits, first try", CreatedAt: at(time.Minute),
	}
}

func register(t *testing.T, s store.Store, v *virga.ModelVersion) *virga.ModelVersion {
	t.Helper()
	if err := s.RegisterModelVersion(context.Background(), v); err != nil {
		t.Fatalf("RegisterModelVersion(%s): %v", v.Name, err)
	}
	return v
}

func testModelVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	if ms, err := s.Models(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("Models of an empty store = %v, %v; want none", ms, err)
	}
	v1 := register(t, s, newModelVersion("digits", strings.Repeat("a", 64)))
	// The version number is the store's: what the caller gives is ignored.
	v2 := newModelVersion("digits", strings.Repeat("b", 64))
	v2.Version, v2.HParams, v2.Metrics, v2.CreatedAt = 42, nil, nil, at(2*time.Minute)
	register(t, s, v2)
	other := register(t, s, newModelVersion("another", strings.Repeat("a", 64)))
	if v1.Version != 1 || v2.Version != 2 || other.Version != 1 {
		t.Fatalf("versions = %d, %d, %d (another); want 1, 2, 1", v1.Version, v2.Version, other.Version)
	}
	got, err := s.ModelVersion(ctx, "digits", 1)
	if err != nil {
		t.Fatalf("ModelVersion(digits, 1): %v", err)
	}
	diff(t, "version 1", v1, got)
	got, err = s.ModelVersion(ctx, "digits", 0)
	if err != nil {
		t.Fatalf("ModelVersion(digits, newest): %v", err)
	}
	diff(t, "newest version", v2, got)
	vs, err := s.ModelVersions(ctx, "digits")
	if err != nil {
		t.Fatalf("ModelVersions: %v", err)
	}
	diff(t, "versions", []*virga.ModelVersion{v1, v2}, vs)
	if vs, err := s.ModelVersions(ctx, "nothing"); err != nil || len(vs) != 0 {
		t.Errorf("ModelVersions(nothing) = %v, %v; want none", vs, err)
	}
	ms, err := s.Models(ctx)
	if err != nil {
		t.Fatalf("Models: %v", err)
	}
	diff(t, "models", []virga.Model{
		{Name: "another", Versions: 1, Latest: 1, UpdatedAt: at(time.Minute)},
		{Name: "digits", Versions: 2, Latest: 2, UpdatedAt: at(2 * time.Minute)},
	}, ms)
	_, err = s.ModelVersion(ctx, "digits", 3)
	wantErr(t, "ModelVersion(digits, 3)", err, virga.ErrNotFound)
	_, err = s.ModelVersion(ctx, "nothing", 0)
	wantErr(t, "ModelVersion(nothing, newest)", err, virga.ErrNotFound)

	// A deleted number is never given again, even once the model has no
	// version left.
	for _, v := range []int64{2, 1} {
		if _, _, err := s.DeleteModelVersion(ctx, "digits", v); err != nil {
			t.Fatalf("DeleteModelVersion(digits, %d): %v", v, err)
		}
	}
	if ms, err := s.Models(ctx); err != nil || len(ms) != 1 || ms[0].Name != "another" {
		t.Errorf("Models after deleting every digits version = %v, %v; want only another", ms, err)
	}
	v3 := register(t, s, newModelVersion("digits", strings.Repeat("b", 64)))
	if v3.Version != 3 {
		t.Errorf("version registered after deletes = %d, want 3", v3.Version)
	}
}

func testModelAliases(t *testing.T, s store.Store) {
	ctx := context.Background()
	register(t, s, newModelVersion("digits", strings.Repeat("a", 64)))
	register(t, s, newModelVersion("digits", strings.Repeat("b", 64)))
	register(t, s, newModelVersion("other", strings.Repeat("a", 64)))
	prod := virga.ModelAlias{Name: "digits", Alias: "prod", Version: 1, UpdatedAt: at(time.Hour)}
	for _, a := range []virga.ModelAlias{prod,
		{Name: "digits", Alias: "canary", Version: 2, UpdatedAt: at(time.Hour)},
		{Name: "other", Alias: "prod", Version: 1, UpdatedAt: at(time.Hour)}} {
		if err := s.SetModelAlias(ctx, a); err != nil {
			t.Fatalf("SetModelAlias(%+v): %v", a, err)
		}
	}
	// Moving an alias replaces it.
	prod.Version, prod.UpdatedAt = 2, at(2*time.Hour)
	if err := s.SetModelAlias(ctx, prod); err != nil {
		t.Fatalf("SetModelAlias(move): %v", err)
	}
	as, err := s.ModelAliases(ctx, "digits")
	if err != nil {
		t.Fatalf("ModelAliases: %v", err)
	}
	diff(t, "aliases", []virga.ModelAlias{{Name: "digits", Alias: "canary", Version: 2, UpdatedAt: at(time.Hour)}, prod}, as)
	all, err := s.ModelAliases(ctx, "")
	if err != nil || len(all) != 3 || all[2].Name != "other" {
		t.Errorf("ModelAliases(all) = %v, %v; want digits' two then other's", all, err)
	}
	wantErr(t, "SetModelAlias(missing version)",
		s.SetModelAlias(ctx, virga.ModelAlias{Name: "digits", Alias: "x", Version: 9, UpdatedAt: at(0)}), virga.ErrNotFound)
	wantErr(t, "SetModelAlias(missing model)",
		s.SetModelAlias(ctx, virga.ModelAlias{Name: "nothing", Alias: "x", Version: 1, UpdatedAt: at(0)}), virga.ErrNotFound)

	// A version an alias points at cannot be deleted; the error names the aliases.
	_, _, err = s.DeleteModelVersion(ctx, "digits", 2)
	wantErr(t, "DeleteModelVersion(aliased)", err, virga.ErrConflict)
	if err == nil || !strings.Contains(err.Error(), "digits@canary, digits@prod") {
		t.Errorf("DeleteModelVersion(aliased) = %v; want the aliases named", err)
	}
	if _, err := s.ModelVersion(ctx, "digits", 2); err != nil {
		t.Errorf("the refused delete removed the version: %v", err)
	}
	for _, alias := range []string{"prod", "canary"} {
		if err := s.DeleteModelAlias(ctx, "digits", alias); err != nil {
			t.Fatalf("DeleteModelAlias(%s): %v", alias, err)
		}
	}
	wantErr(t, "DeleteModelAlias(again)", s.DeleteModelAlias(ctx, "digits", "prod"), virga.ErrNotFound)
	if _, _, err := s.DeleteModelVersion(ctx, "digits", 2); err != nil {
		t.Errorf("DeleteModelVersion once its aliases are gone: %v", err)
	}
	_, _, err = s.DeleteModelVersion(ctx, "digits", 2)
	wantErr(t, "DeleteModelVersion(again)", err, virga.ErrNotFound)
}

func testModelFilesShared(t *testing.T, s store.Store) {
	ctx := context.Background()
	shared, alone := strings.Repeat("a", 64), strings.Repeat("b", 64)
	register(t, s, newModelVersion("digits", shared))
	register(t, s, newModelVersion("copy", shared))
	register(t, s, newModelVersion("digits", alone))
	for _, tc := range []struct {
		name       string
		version    int64
		wantFiles  string
		wantShared bool
	}{
		{"digits", 1, shared, true}, // copy:1 has them too
		{"digits", 2, alone, false},
		{"copy", 1, shared, false}, // the last one
	} {
		files, isShared, err := s.DeleteModelVersion(ctx, tc.name, tc.version)
		if err != nil || files != tc.wantFiles || isShared != tc.wantShared {
			t.Errorf("DeleteModelVersion(%s, %d) = %.8s, %v, %v; want %.8s, %v", tc.name, tc.version, files, isShared, err, tc.wantFiles, tc.wantShared)
		}
	}
}

// testModelConcurrentRegister registers versions of one model from many
// goroutines: every number from 1 to n is given exactly once.
func testModelConcurrentRegister(t *testing.T, s store.Store) {
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, n)
	got := make(chan int64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := newModelVersion("digits", fmt.Sprintf("%064x", i))
			if err := s.RegisterModelVersion(context.Background(), v); err != nil {
				errs <- err
				return
			}
			got <- v.Version
		}()
	}
	wg.Wait()
	close(errs)
	close(got)
	for err := range errs {
		t.Fatalf("RegisterModelVersion: %v", err)
	}
	var versions []int64
	for v := range got {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	for i, v := range versions {
		if v != int64(i+1) {
			t.Fatalf("versions given = %v; want 1..%d once each", versions, n)
		}
	}
	if m, err := s.Models(context.Background()); err != nil || len(m) != 1 || m[0].Versions != n {
		t.Errorf("Models = %v, %v; want digits with %d versions", m, err, n)
	}
}

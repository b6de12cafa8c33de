package elastic

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// TestJoinAsOtherAlgorithmRefused: a worker of another algorithm cannot
// join a coordinator (it would push into a state it does not understand);
// a worker of the same one, or one that does not say, can.
func TestJoinAsOtherAlgorithmRefused(t *testing.T) {
	c := NewCoordinator(NewMemState(0))
	c.Algorithm = "median"
	srv := httptest.NewServer(c)
	defer srv.Close()
	ctx := context.Background()
	_, err := JoinAs(ctx, srv.URL, "", "moments")
	if !errors.Is(err, ErrOtherAlgorithm) || !strings.Contains(err.Error(), "median") || !strings.Contains(err.Error(), "moments") {
		t.Fatalf("a moments worker joining a median coordinator: %v; want ErrOtherAlgorithm naming both", err)
	}
	if c.Members() != 0 {
		t.Errorf("%d members after a refused join; want 0", c.Members())
	}
	for _, name := range []string{"median", ""} {
		w, err := JoinAs(ctx, srv.URL, "", name)
		if err != nil {
			t.Fatalf("joining as %q: %v", name, err)
		}
		w.Close()
	}
}

// TestCheckpointOfAnotherAlgorithmRefused: a job resumes only from its own
// algorithm's checkpoint, of the same shapes; the checkpoint is left as
// it was.
func TestCheckpointOfAnotherAlgorithmRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	x := make([]float64, 2000)
	for i := range x {
		x[i] = float64(i)
	}
	j := &Job{Alg: Moments{}, Name: "moments", Shards: 1, CheckpointDir: dir, Open: SliceOpener(x, nil, 1, 1, 100)}
	if _, _, err := j.Run(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, StateFile)
	before, err := ReadCheckpoint(path)
	if err != nil || before.Algorithm != "moments" {
		t.Fatalf("the checkpoint: %+v, %v; want one of moments", before.Algorithm, err)
	}
	other := &Job{Alg: Median{}, Name: "median", Shards: 1, CheckpointDir: dir, Open: SliceOpener(x, nil, 1, 1, 100)}
	_, _, err = other.Run(ctx)
	if !errors.Is(err, ErrNotItsState) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "moments") {
		t.Fatalf("median resuming a moments checkpoint: %v; want ErrNotItsState naming the file and moments", err)
	}
	// Unnamed: the shapes tell (Median has no tensor "moments.sum"...).
	other.Name = ""
	if _, _, err = other.Run(ctx); !errors.Is(err, ErrNotItsState) {
		t.Fatalf("an unnamed median resuming a moments checkpoint: %v; want ErrNotItsState", err)
	}
	// Same algorithm, tensors of other shapes (other parameters or width).
	bad := Checkpoint{Algorithm: "median", Tensors: map[string]Tensor{keyMedian: {0, 0}, keyCount: {0}}}
	if err := bad.Fits(ctx, "median", Median{}); !errors.Is(err, ErrNotItsState) || !strings.Contains(err.Error(), keyMedian) {
		t.Errorf("a median state with a median of 2 numbers: %v; want ErrNotItsState naming the tensor", err)
	}
	after, err := ReadCheckpoint(path)
	if err != nil || Rows(after.Tensors) != Rows(before.Tensors) {
		t.Errorf("the refused resumes changed the checkpoint: %v rows, %v; want %d", Rows(after.Tensors), err, Rows(before.Tensors))
	}
	// A base state of another algorithm is refused too.
	inc := &Job{Alg: Median{}, Name: "median", Shards: 1, Base: before.Tensors, Open: SliceOpener(x, nil, 1, 1, 100)}
	if _, _, err := inc.Run(ctx); !errors.Is(err, ErrNotItsState) {
		t.Errorf("median from a moments base state: %v; want ErrNotItsState", err)
	}
}

// TestCoordinatorRoutes: the coordinator answers its routes with their
// methods only (405 otherwise, 404 for a path it does not serve), and with
// a token set, every route wants exactly that bearer token.
func TestCoordinatorRoutes(t *testing.T) {
	c := NewCoordinator(NewMemState(0))
	c.Token = "s3cret"
	srv := httptest.NewServer(c)
	defer srv.Close()
	call := func(method, path, auth string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/join", "", http.StatusUnauthorized},
		{"POST", "/join", "Bearer s3cre", http.StatusUnauthorized},
		{"POST", "/join", "Bearer s3cret2", http.StatusUnauthorized},
		{"POST", "/join", "s3cret", http.StatusUnauthorized},
		{"GET", "/snapshot", "Bearer wrong", http.StatusUnauthorized},
		{"POST", "/join", "Bearer s3cret", http.StatusOK},
		{"GET", "/snapshot", "Bearer s3cret", http.StatusOK},
		{"GET", "/join", "Bearer s3cret", http.StatusMethodNotAllowed},
		{"POST", "/snapshot", "Bearer s3cret", http.StatusMethodNotAllowed},
		{"GET", "/push", "Bearer s3cret", http.StatusMethodNotAllowed},
		{"POST", "/nothing", "Bearer s3cret", http.StatusNotFound},
		{"POST", "/pull?worker=x", "Bearer s3cret", http.StatusBadRequest},
		{"POST", "/pull?worker=1&instance=old", "Bearer s3cret", http.StatusGone},
	} {
		if got := call(tc.method, tc.path, tc.auth); got != tc.want {
			t.Errorf("%s %s with %q: %d; want %d", tc.method, tc.path, tc.auth, got, tc.want)
		}
	}
}

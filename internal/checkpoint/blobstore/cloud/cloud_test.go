package cloud_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"gocloud.dev/blob"

	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore/cloud"
	"github.com/virga-ml/virga/internal/checkpoint/checkpointtest"
)

// s3Counts counts requests to the fake S3 server.
type s3Counts struct {
	writes    atomic.Int64 // PUT and POST requests
	multipart atomic.Int64 // multipart uploads created
	ended     atomic.Int64 // multipart uploads completed or aborted
}

// fakeS3 starts an S3-compatible server holding bucket "ckpt" and returns
// its URL and counts of its requests.
func fakeS3(t *testing.T) (string, *s3Counts) {
	t.Helper()
	mem := s3mem.New()
	if err := mem.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(mem)
	counts := new(s3Counts)
	h := faker.Server()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method == http.MethodPut || r.Method == http.MethodPost {
			counts.writes.Add(1)
		}
		switch {
		case r.Method == http.MethodPost && q.Has("uploads"):
			counts.multipart.Add(1)
		case (r.Method == http.MethodPost || r.Method == http.MethodDelete) && q.Has("uploadId"):
			counts.ended.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	// Credentials for the signature (the fake accepts any), and nothing from
	// this machine's AWS configuration.
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":           "test",
		"AWS_SECRET_ACCESS_KEY":       "test",
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             filepath.Join(t.TempDir(), "none"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "none"),
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
	u := "s3://ckpt?endpoint=" + url.QueryEscape(ts.URL) + "&use_path_style=true&region=us-east-1&disable_https=true"
	return u, counts
}

// listBucket returns every key in the bucket at u.
func listBucket(t *testing.T, u string) []string {
	t.Helper()
	b, err := blob.OpenBucket(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var keys []string
	it := b.List(nil)
	for {
		o, err := it.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("listing: %v", err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// openS3 returns a store in a fresh fake S3 bucket.
func openS3(t *testing.T) checkpointtest.Backend {
	u, counts := fakeS3(t)
	s, err := checkpoint.OpenURL(context.Background(), u, cloud.Schemes())
	if err != nil {
		t.Fatal(err)
	}
	bs, ok := s.(*blobstore.Store)
	if !ok {
		t.Fatalf("storage is a %T, want a *blobstore.Store", s)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return checkpointtest.Backend{
		Storage:        s,
		Objects:        func() []string { return listBucket(t, u) },
		Uploads:        bs.Uploads,
		Writes:         counts.writes.Load,
		Multipart:      func() (int64, int64) { return counts.multipart.Load(), counts.ended.Load() },
		SaveForContext: bs.SaveForContext,
		SetUploadHook:  bs.SetUploadHook,
	}
}

func TestS3Conformance(t *testing.T) { checkpointtest.RunStorage(t, openS3) }

// TestS3AbortedUploadLeavesNothing: an S3 upload that fails midway, by an
// error or a cancelled context, stores nothing, and its multipart upload is
// aborted (its parts not left stored and billed).
func TestS3AbortedUploadLeavesNothing(t *testing.T) { checkpointtest.RunAbortedUpload(t, openS3) }

func TestOpenURL(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct{ url, want string }{
		{"s3://", "s3://bucket-name"},
		{"gs://", "gs://bucket-name"},
		{"azblob://", "azblob://bucket-name"},
		{"mem://", `unknown scheme "mem"; want a directory path, azblob://, gs://, s3://`},
	} {
		_, err := checkpoint.OpenURL(ctx, tt.url, cloud.Schemes())
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.url) {
			t.Errorf("OpenURL(%q): %v, want an error naming the URL and saying %q", tt.url, err, tt.want)
		}
	}
	// A bucket that does not exist is refused at once.
	u, _ := fakeS3(t)
	missing := strings.Replace(u, "s3://ckpt", "s3://nosuchbucket", 1)
	if _, err := checkpoint.OpenURL(ctx, missing, cloud.Schemes()); err == nil || !strings.Contains(err.Error(), "nosuchbucket") {
		t.Errorf("OpenURL of a missing bucket: %v, want an error naming it", err)
	}
	// prefix= keeps the checkpoints under it.
	s, err := checkpoint.OpenURL(ctx, u+"&prefix=team/a/", cloud.Schemes())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	src := filepath.Join(checkpointtest.TempDir(t), "src")
	checkpointtest.Write(t, src, checkpointtest.Tree{"a": checkpointtest.File(0o644, "a")})
	info, err := s.Save(src)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listBucket(t, u), []string{"team/a/checkpoints/" + info.ID + ".tar"}; !slices.Equal(got, want) {
		t.Errorf("the bucket holds %v, want %v", got, want)
	}
}

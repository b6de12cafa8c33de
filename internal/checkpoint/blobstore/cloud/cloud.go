// Package cloud opens checkpoint storage in the cloud object stores: S3 (and
// S3-compatible servers), Google Cloud Storage and Azure Blob Storage, through
// gocloud.dev's drivers. It links their SDKs (several hundred packages), so
// only a binary's wiring imports it, in the builds that want the cloud
// buckets; the control loop, the API and the agent never do.
package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/blob/s3blob"

	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore"
)

// Schemes returns the Openers of s3://bucket, gs://bucket and
// azblob://container checkpoint storage: a blobstore.Store over that bucket,
// with gocloud.dev's URL parameters (for S3 e.g. region=, endpoint=,
// use_path_style=true; credentials from the environment), checked to be
// reachable. A URL may carry prefix=dir/ to keep the checkpoints under it.
func Schemes() checkpoint.Schemes {
	return checkpoint.Schemes{
		s3blob.Scheme:    opener(UploadS3),
		gcsblob.Scheme:   opener(nil),
		azureblob.Scheme: opener(nil),
	}
}

// opener opens a bucket URL of the cloud schemes, uploading with upload.
func opener(upload blobstore.Uploader) checkpoint.Opener {
	return func(ctx context.Context, u *url.URL, location string) (checkpoint.Storage, error) {
		if u.Host == "" {
			return nil, fmt.Errorf("opening checkpoint storage %q: no bucket named; want %s://bucket-name", location, u.Scheme)
		}
		return blobstore.OpenBucket(ctx, u, location, upload)
	}
}

// UploadS3 is the blobstore.Uploader of S3. There an aborted multipart upload
// must be told to S3 (AbortMultipartUpload), or its parts stay stored, unseen
// and billed; the upload manager does it when its input fails, but with the
// upload's context, which therefore must still be live. So the archive is fed
// to the upload through a pipe, and any failure, the caller's cancellation
// included, is a read error of the pipe; the upload's own context is
// cancelled only if the upload has not ended abortGrace after the caller's
// was.
func UploadS3(ctx context.Context, bucket *blob.Bucket, key string, write func(io.Writer) error) error {
	uctx, ucancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ucancel()
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() {
		pr.CloseWithError(ctx.Err())
		time.AfterFunc(abortGrace, ucancel)
	})
	defer stop()

	done := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err) // nil: EOF, the upload completes
		done <- err
	}()
	err := bucket.Upload(uctx, key, pr, &blob.WriterOptions{ContentType: blobstore.ContentType})
	pr.CloseWithError(errUploadEnded) // unblocks the archive if the upload failed first
	werr := <-done
	switch {
	case werr != nil && !errors.Is(werr, errUploadEnded):
		return werr
	case err != nil:
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return err
	}
	return nil
}

// abortGrace is how long an S3 upload whose caller gave up may take to abort
// before its requests are cancelled too.
const abortGrace = 30 * time.Second

// errUploadEnded stops an archive whose upload ended early (it failed).
var errUploadEnded = errors.New("upload ended")

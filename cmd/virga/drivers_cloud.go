//go:build cloud

package main

import (
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/checkpoint/blobstore/cloud"
)

// cloudTag is the build tag that links the cloud object stores.
const cloudTag = "cloud"

// cloudSchemes opens s3://, gs:// and azblob:// checkpoint storage.
func cloudSchemes() checkpoint.Schemes { return cloud.Schemes() }
